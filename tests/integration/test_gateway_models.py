"""The model registry at the gateway, against a real nats-server and
PostgreSQL: models created once, versions numbered per model (also when
registered at the same time), who may register, what may be registered, and
read models rebuilt from the log with the same rows."""

import asyncio
import json
import pathlib

import asyncpg
import grpc
import test_gateway
from test_gateway import stored
from test_gateway_checkpoints import ended, with_four_checkpoints
from test_gateway_stop_resume import append, refused, token_of
from test_rebuild import dump

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.eventstore import EventStore
from services.gateway.rebuild import rebuild
from services.gateway.server import Gateway

# test_gateway's started gateway (the api fixture on it comes from conftest.py).
gateway = test_gateway.gateway


def register(
    checkpoint_uuid: str, model: str = "mnist", **fields: str
) -> api_pb2.RegisterModelVersionRequest:
    return api_pb2.RegisterModelVersionRequest(model_name=model, checkpoint_uuid=checkpoint_uuid, **fields)


async def test_models_are_created_once_and_listed_in_creation_order(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore
) -> None:
    created = await api.CreateModel(
        api_pb2.CreateModelRequest(
            name="mnist", description="digits", metadata_json='{"team": "a"}', labels=["cnn"]
        )
    )
    model = created.model
    assert (model.model_id, model.name, model.description, model.owner, list(model.labels)) == (
        1,
        "mnist",
        "digits",
        "determined",
        ["cnn"],
    )
    assert json.loads(model.metadata_json) == {"team": "a"} and model.created_at_ns > 0
    again = await refused(
        api.CreateModel(api_pb2.CreateModelRequest(name="mnist")), grpc.StatusCode.ALREADY_EXISTS
    )
    assert again == "model mnist exists already"
    await api.CreateModel(api_pb2.CreateModelRequest(name="cifar"))
    bad = await refused(
        api.CreateModel(api_pb2.CreateModelRequest(name="a.b")), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "name" in bad
    listed = (await api.GetModels(api_pb2.GetModelsRequest())).models
    assert [(m.model_id, m.name, m.num_versions) for m in listed] == [(1, "mnist", 0), (2, "cifar", 0)]
    events = await stored(event_store, "model")
    assert [e.event_id for e in events] == ["model-mnist", "model-cifar"]
    assert "not for CreateModel" in await refused(
        api.CreateModel(api_pb2.CreateModelRequest(name="x"), metadata=token_of("1.1")),
        grpc.StatusCode.PERMISSION_DENIED,
    )
    missing = await refused(api.GetModel(api_pb2.GetModelRequest(name="nope")), grpc.StatusCode.NOT_FOUND)
    assert missing == "model nope not found"


async def test_versions_are_numbered_per_model_and_name_their_checkpoints(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    await api.CreateModel(api_pb2.CreateModelRequest(name="mnist"))
    first = (await api.RegisterModelVersion(register("b", name="best", comment="lowest loss"))).version
    assert (first.model_name, first.version, first.name, first.comment, first.owner) == (
        "mnist",
        1,
        "best",
        "lowest loss",
        "determined",
    )
    assert first.checkpoint.uuid == "b" and first.checkpoint.model_versions == ["mnist:1"]
    racing = await asyncio.gather(*[api.RegisterModelVersion(register(uuid)) for uuid in ("a", "c", "d")])
    assert sorted(r.version.version for r in racing) == [2, 3, 4]
    model = (await api.GetModel(api_pb2.GetModelRequest(name="mnist"))).model
    assert model.num_versions == 4
    assert [v.version for v in model.versions] == [1, 2, 3, 4]
    assert model.versions[0].checkpoint.searcher_metric == 0.2
    assert (await api.GetModels(api_pb2.GetModelsRequest())).models[0].versions == []
    events = [e for e in await stored(event_store, "model") if e.HasField("model_version_registered")]
    assert sorted(e.event_id for e in events) == [f"model-version-mnist-{n}" for n in (1, 2, 3, 4)]
    assert events[0].model_version_registered.experiment_id == 1
    checkpoint = (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="b"))).checkpoint
    assert list(checkpoint.model_versions) == ["mnist:1"]


async def test_what_cannot_be_registered(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    await api.CreateModel(api_pb2.CreateModelRequest(name="mnist"))
    assert await refused(
        api.RegisterModelVersion(register("b", model="nope")), grpc.StatusCode.NOT_FOUND
    ) == ("model nope not found")
    assert "checkpoint zz not found" in await refused(
        api.RegisterModelVersion(register("zz")), grpc.StatusCode.NOT_FOUND
    )
    assert "not for RegisterModelVersion" in await refused(
        api.RegisterModelVersion(register("b"), metadata=token_of("1.1")), grpc.StatusCode.PERMISSION_DENIED
    )
    requested = events_pb2.CheckpointDeletionRequested(experiment_id=1, deletion_id=1, uuids=["a"])
    await append(event_store, gateway, "experiment/1", requested, "gc-1-1")
    assert "checkpoint a is DELETING" in await refused(api.RegisterModelVersion(register("a")))
    await ended(event_store, gateway)
    await api.DeleteExperiment(api_pb2.DeleteExperimentRequest(experiment_id=1))
    assert "which is DELETING" in await refused(api.RegisterModelVersion(register("b")))
    assert (await api.GetModel(api_pb2.GetModelRequest(name="mnist"))).model.num_versions == 0


async def test_the_registry_is_rebuilt_from_the_log(
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    tmp_path: pathlib.Path,
    database_url: str,
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    await api.CreateModel(api_pb2.CreateModelRequest(name="mnist", labels=["x"]))
    await api.RegisterModelVersion(register("b"))
    await api.SetGcPolicy(api_pb2.SetGcPolicyRequest(experiment_id=1, save_trial_latest=1))
    assert await gateway.projector.catch_up()
    await gateway.stop()  # a rebuild runs with the gateways stopped
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        before = await dump(pool)
        await rebuild(event_store, pool)
        assert await dump(pool) == before
        assert before["model_versions"][0][:2] == ("mnist:1", "mnist")
    finally:
        await pool.close()
