"""The gateway's checkpoint RPCs against a real nats-server, PostgreSQL and
storage (a shared_fs folder; moto's S3 server): listings and their order,
the GC preview and policy, what deleting checkpoints and experiments appends
and how the read models show the checkpoint service's answers, who may do
what, and downloads through the gateway."""

import json
import pathlib
from typing import Any

import grpc
import pytest
import test_gateway
from support.s3_server import S3Server
from test_gateway import given_trial, stored
from test_gateway_stop_resume import append, refused, token_of

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

# test_gateway's started gateway (the api fixture on it comes from conftest.py).
gateway = test_gateway.gateway

NOT_FOUND = grpc.StatusCode.NOT_FOUND
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


def config(storage: dict[str, Any]) -> str:
    return json.dumps(
        {
            "entrypoint": "python3 train.py",
            "searcher": {"name": "random", "metric": "loss", "max_trials": 2, "max_length": 100},
            "checkpoint_storage": storage,
        }
    )


async def given_experiment(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, store: EventStore, storage: dict[str, Any]
) -> None:
    """Experiment 1 with trials 1 and 2 (allocations 1.1 and 2.1 requested)."""
    created = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=config(storage), activate=True)
    )
    assert created.experiment_id == 1
    for trial_id in (1, 2):
        await given_trial(store, gateway, trial_id=trial_id)


async def report(
    api: api_pb2_grpc.DeterminedStub,
    trial_id: int,
    uuid: str,
    steps: int,
    loss: float | None = None,
    files: dict[str, bytes] | None = None,
    storage: pathlib.Path | None = None,
) -> None:
    """A checkpoint of the trial at `steps` (its files written under `storage`
    when given), and its validation when `loss` is given."""
    files = files if files is not None else {"model.pt": b"m" * steps}
    if storage is not None:
        for relpath, data in files.items():
            (storage / uuid / relpath).parent.mkdir(parents=True, exist_ok=True)
            if not relpath.endswith("/"):  # a folder, as the harness records one
                (storage / uuid / relpath).write_bytes(data)
    token = token_of(f"{trial_id}.1")
    if loss is not None:
        validation = events_pb2.MetricReport(
            group="validation", steps_completed=steps, metrics_json=json.dumps({"loss": loss, "acc": -loss})
        )
        request = api_pb2.ReportMetricsRequest(
            trial_id=trial_id, trial_run_id=1, batch_seq=steps, reporter_id="p", reports=[validation]
        )
        await api.ReportMetrics(request, metadata=token)
    resources = {relpath: len(data) for relpath, data in files.items()}
    checkpoint = api_pb2.ReportCheckpointRequest(
        uuid=uuid,
        trial_id=trial_id,
        allocation_id=f"{trial_id}.1",
        steps_completed=steps,
        resources=resources,
        metadata_json=json.dumps({"steps_completed": steps}),
    )
    await api.ReportCheckpoint(checkpoint, metadata=token)


async def ended(
    store: EventStore, gateway: Gateway, state: int = events_pb2.EXPERIMENT_STATE_COMPLETED
) -> None:
    changed = events_pb2.ExperimentStateChanged(experiment_id=1, state=state)
    await append(store, gateway, "experiment/1", changed, f"ended-{state}")


async def with_four_checkpoints(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, store: EventStore, storage: pathlib.Path
) -> None:
    """Trial 1: a (10 steps, loss 0.5), b (20, 0.2), c (30, no validation); trial 2: d (10, 0.9)."""
    await given_experiment(api, gateway, store, {"type": "shared_fs", "host_path": str(storage)})
    await report(api, 1, "a", 10, 0.5, storage=storage)
    await report(api, 1, "b", 20, 0.2, storage=storage)
    await report(api, 1, "c", 30, storage=storage)
    await report(api, 2, "d", 10, 0.9, storage=storage)
    assert await gateway.projector.catch_up()


def listed(response: api_pb2.GetCheckpointsResponse) -> list[str]:
    return [c.uuid for c in response.checkpoints]


async def test_checkpoints_show_their_validation_storage_and_state(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    found = (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="b"))).checkpoint
    assert (found.trial_id, found.experiment_id, found.steps_completed, found.state) == (
        1,
        1,
        20,
        "COMPLETED",
    )
    assert json.loads(found.validation_metrics_json) == {"loss": 0.2, "acc": -0.2}
    assert found.searcher_metric == 0.2
    assert json.loads(found.storage_json) == {
        "type": "shared_fs",
        "host_path": str(tmp_path),
        "storage_path": None,
        "propagation": "rprivate",
        "container_path": None,
        "checkpoint_path": None,
        "tensorboard_path": None,
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }
    assert dict(found.resources) == {"model.pt": 20}
    no_validation = (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="c"))).checkpoint
    assert not no_validation.HasField("searcher_metric") and no_validation.validation_metrics_json == ""
    assert "checkpoint nope not found" in await refused(
        api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="nope")), NOT_FOUND
    )
    trial = await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))
    assert [c.uuid for c in trial.checkpoints] == ["a", "b", "c"]
    assert trial.checkpoints[1].searcher_metric == 0.2


async def test_listings_sort_as_asked(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)

    async def experiment(sort_by: str = "", order_by: str = "", max_results: int = 0) -> list[str]:
        request = api_pb2.GetExperimentCheckpointsRequest(
            experiment_id=1, sort_by=sort_by, order_by=order_by, max_results=max_results
        )
        return listed(await api.GetExperimentCheckpoints(request))

    assert await experiment() == ["a", "b", "c", "d"]
    assert await experiment(order_by="desc") == ["d", "c", "b", "a"]
    assert await experiment("searcher_metric") == ["b", "a", "d", "c"]
    assert await experiment("searcher_metric", max_results=1) == ["b"]
    assert await experiment("loss", "desc") == ["d", "a", "b", "c"]
    assert await experiment("acc") == ["d", "a", "b", "c"]
    assert await experiment("steps_completed", "desc") == ["c", "b", "a", "d"]
    trial = api_pb2.GetTrialCheckpointsRequest(trial_id=1, sort_by="searcher_metric")
    assert listed(await api.GetTrialCheckpoints(trial)) == ["b", "a", "c"]
    bad = api_pb2.GetExperimentCheckpointsRequest(experiment_id=1, order_by="up")
    assert "order_by" in await refused(api.GetExperimentCheckpoints(bad), INVALID_ARGUMENT)
    missing = api_pb2.GetExperimentCheckpointsRequest(experiment_id=9)
    assert "experiment 9 not found" in await refused(api.GetExperimentCheckpoints(missing), NOT_FOUND)
    assert "trial 9" in await refused(
        api.GetTrialCheckpoints(api_pb2.GetTrialCheckpointsRequest(trial_id=9)), NOT_FOUND
    )


async def test_the_gc_preview_and_a_new_policy(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    preview = await api.PreviewGc(
        api_pb2.PreviewGcRequest(experiment_id=1, save_trial_best=1, save_trial_latest=1)
    )
    assert ([c.uuid for c in preview.checkpoints], preview.bytes) == (["a"], 10)
    nothing_kept = await api.PreviewGc(api_pb2.PreviewGcRequest(experiment_id=1))
    assert ([c.uuid for c in nothing_kept.checkpoints], nothing_kept.bytes) == (["a", "b", "c", "d"], 70)
    negative = api_pb2.PreviewGcRequest(experiment_id=1, save_trial_best=-1)
    assert "save_trial_best" in await refused(api.PreviewGc(negative), INVALID_ARGUMENT)

    same = api_pb2.SetGcPolicyRequest(experiment_id=1, save_trial_best=1, save_trial_latest=1)
    assert "has this GC policy already" in (await api.SetGcPolicy(same)).unchanged_reason
    new = api_pb2.SetGcPolicyRequest(experiment_id=1, save_experiment_best=1, save_trial_latest=1)
    assert (await api.SetGcPolicy(new)).unchanged_reason == ""
    [changed] = [
        e for e in await stored(event_store, "experiment") if e.HasField("checkpoint_gc_policy_changed")
    ]
    assert changed.event_id.startswith("gc-policy-1-") and changed.actor == "user:determined"
    assert changed.checkpoint_gc_policy_changed == events_pb2.CheckpointGcPolicyChanged(
        experiment_id=1, save_experiment_best=1, save_trial_latest=1
    )
    shown = (await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))).experiment
    storage = json.loads(shown.config_json)["checkpoint_storage"]
    assert (storage["save_experiment_best"], storage["save_trial_best"], storage["save_trial_latest"]) == (
        1,
        0,
        1,
    )
    assert "has this GC policy already" in (await api.SetGcPolicy(new)).unchanged_reason
    assert "not for SetGcPolicy" in await refused(
        api.SetGcPolicy(new, metadata=token_of("1.1")), PERMISSION_DENIED
    )


async def test_deleting_checkpoints_records_the_request_and_shows_the_outcome(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    unknown = api_pb2.DeleteCheckpointsRequest(uuids=["a", "zz"])
    assert "zz" in await refused(api.DeleteCheckpoints(unknown), NOT_FOUND)
    outside = api_pb2.DeleteCheckpointsRequest(uuids=["a"], globs=["../x"])
    assert "reaches outside" in await refused(api.DeleteCheckpoints(outside), INVALID_ARGUMENT)
    foreign = api_pb2.DeleteCheckpointsRequest(uuids=["a", "d"])
    denied = await refused(api.DeleteCheckpoints(foreign, metadata=token_of("1.1")), PERMISSION_DENIED)
    assert denied == "trial 1 may delete its own checkpoints only, not d"
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["a"]), metadata=token_of("1.1"))
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["b"], globs=["*.pt"]))
    asked = [e for e in await stored(event_store, "experiment") if e.HasField("checkpoint_delete_asked")]
    assert [
        (
            list(e.checkpoint_delete_asked.uuids),
            list(e.checkpoint_delete_asked.globs),
            e.checkpoint_delete_asked.asked_by,
        )
        for e in asked
    ] == [(["a"], [], "trial:1"), (["b"], ["*.pt"], "user:determined")]

    # The checkpoint service's answers, as the read models show them.
    requested = events_pb2.CheckpointDeletionRequested(experiment_id=1, deletion_id=1, uuids=["a", "b"])
    await append(event_store, gateway, "experiment/1", requested, "gc-1-1")
    assert (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="a"))).checkpoint.state == "DELETING"
    await append(
        event_store,
        gateway,
        "checkpoint/a",
        events_pb2.CheckpointDeleted(uuid="a", experiment_id=1, trial_id=1, deletion_id=1, bytes_freed=10),
        "checkpoint-deleted-a",
    )
    await append(
        event_store,
        gateway,
        "checkpoint/b",
        events_pb2.CheckpointPartiallyDeleted(
            uuid="b",
            experiment_id=1,
            trial_id=1,
            deletion_id=1,
            remaining={"model.pt": 20},
            error="model.pt: permission denied",
        ),
        "checkpoint-partially-deleted-b-1",
    )
    partial = (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="b"))).checkpoint
    assert (partial.state, dict(partial.resources), partial.delete_error) == (
        "PARTIALLY_DELETED",
        {"model.pt": 20},
        "model.pt: permission denied",
    )
    every = api_pb2.GetExperimentCheckpointsRequest(experiment_id=1)
    assert listed(await api.GetExperimentCheckpoints(every)) == ["b", "c", "d"]
    every.include_deleted = True
    assert listed(await api.GetExperimentCheckpoints(every)) == ["a", "b", "c", "d"]
    deleted = (await api.GetCheckpoint(api_pb2.GetCheckpointRequest(uuid="a"))).checkpoint
    assert (deleted.state, dict(deleted.resources)) == ("DELETED", {})
    # Deleting a deleted checkpoint asks nothing more.
    await api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["a"]))
    assert (
        len([e for e in await stored(event_store, "experiment") if e.HasField("checkpoint_delete_asked")])
        == 2
    )


async def test_deleting_an_experiment(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    request = api_pb2.DeleteExperimentRequest(experiment_id=1)
    running = await refused(api.DeleteExperiment(request))
    assert "experiment 1 is ACTIVE: only COMPLETED, CANCELED, ERROR or DELETE_FAILED" in running
    await ended(event_store, gateway)
    assert "not for DeleteExperiment" in await refused(
        api.DeleteExperiment(request, metadata=token_of("1.1")), PERMISSION_DENIED
    )
    await api.DeleteExperiment(request)
    await api.DeleteExperiment(request)  # being deleted already: nothing more
    shown = (await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))).experiment
    assert shown.state == "DELETING"
    asks = [e for e in await stored(event_store, "experiment") if e.HasField("experiment_delete_requested")]
    assert [e.event_id for e in asks] == ["experiment-delete-1-1"]
    policy = api_pb2.SetGcPolicyRequest(experiment_id=1)
    assert "DELETING" in await refused(api.SetGcPolicy(policy))

    failed = events_pb2.ExperimentDeleteFailed(experiment_id=1, reason="1 checkpoint(s) could not be deleted")
    await append(event_store, gateway, "experiment/1", failed, "experiment-delete-failed-1-1")
    shown = (await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))).experiment
    assert (shown.state, shown.end_reason) == ("DELETE_FAILED", "1 checkpoint(s) could not be deleted")
    await api.DeleteExperiment(request)  # tried again
    asks = [e for e in await stored(event_store, "experiment") if e.HasField("experiment_delete_requested")]
    assert [e.event_id for e in asks] == ["experiment-delete-1-1", "experiment-delete-1-2"]

    await append(
        event_store,
        gateway,
        "experiment/1",
        events_pb2.ExperimentDeleted(experiment_id=1),
        "experiment-deleted-1",
    )
    assert [e.id for e in (await api.GetExperiments(api_pb2.GetExperimentsRequest())).experiments] == []
    for call in (
        api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1)),
        api.GetExperimentCheckpoints(api_pb2.GetExperimentCheckpointsRequest(experiment_id=1)),
        api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1)),
        api.DeleteExperiment(request),
    ):
        assert await refused(call, NOT_FOUND) == "experiment 1 was deleted"


async def test_an_experiment_with_a_model_version_is_not_deleted(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    await ended(event_store, gateway, events_pb2.EXPERIMENT_STATE_CANCELED)
    await api.CreateModel(api_pb2.CreateModelRequest(name="mnist"))
    await api.RegisterModelVersion(
        api_pb2.RegisterModelVersionRequest(model_name="mnist", checkpoint_uuid="b")
    )
    refusal = await refused(api.DeleteExperiment(api_pb2.DeleteExperimentRequest(experiment_id=1)))
    assert refusal == "experiment 1 cannot be deleted: checkpoints of it are model versions: b (mnist:1)"
    version = api_pb2.DeleteCheckpointsRequest(uuids=["a", "b"])
    assert "b (mnist:1)" in await refused(api.DeleteCheckpoints(version), INVALID_ARGUMENT)
    # A model version is kept by any policy.
    preview = await api.PreviewGc(api_pb2.PreviewGcRequest(experiment_id=1))
    assert [c.uuid for c in preview.checkpoints] == ["a", "c", "d"]


async def test_a_warm_start_source_is_kept(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await with_four_checkpoints(api, gateway, event_store, tmp_path)
    source = json.loads(config({"type": "shared_fs", "host_path": str(tmp_path)}))
    source["searcher"]["source_checkpoint_uuid"] = "d"
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=json.dumps(source)))
    from_trial = json.loads(config({"type": "shared_fs", "host_path": str(tmp_path)}))
    from_trial["searcher"]["source_trial_id"] = 1  # its latest checkpoint then: c
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=json.dumps(from_trial)))
    await report(api, 1, "e", 40, storage=tmp_path)  # after: not what the second one started from
    assert await gateway.projector.catch_up()
    preview = await api.PreviewGc(api_pb2.PreviewGcRequest(experiment_id=1))
    assert [c.uuid for c in preview.checkpoints] == ["a", "b", "e"]
    refusal = await refused(
        api.DeleteCheckpoints(api_pb2.DeleteCheckpointsRequest(uuids=["d"])), INVALID_ARGUMENT
    )
    assert refusal == "checkpoints that experiments warm-start from are never deleted: d"


async def download(
    api: api_pb2_grpc.DeterminedStub, uuid: str, path: str, offset: int = 0
) -> tuple[bytes, int]:
    """The bytes streamed from `offset`, and the size every response gave."""
    data, sizes, position = b"", set(), offset
    async for response in api.DownloadCheckpointFile(
        api_pb2.DownloadCheckpointFileRequest(uuid=uuid, path=path, offset=offset)
    ):
        assert response.offset == position
        position += len(response.data)
        data += response.data
        sizes.add(response.size)
    [size] = sizes
    return data, size


async def test_downloads_through_the_gateway_from_shared_fs(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: pathlib.Path
) -> None:
    await given_experiment(api, gateway, event_store, {"type": "shared_fs", "host_path": str(tmp_path)})
    big = bytes(range(256)) * 10_000  # 2.5 MiB: several responses
    await report(
        api, 1, "a", 10, files={"model.pt": big, "sub/state.json": b"{}", "sub/": b""}, storage=tmp_path
    )
    assert await download(api, "a", "model.pt") == (big, len(big))
    assert await download(api, "a", "model.pt", offset=len(big) - 5) == (big[-5:], len(big))
    assert await download(api, "a", "model.pt", offset=len(big)) == (b"", len(big))
    assert await download(api, "a", "sub/state.json") == (b"{}", 2)
    assert "no file" in await refused(download(api, "a", "../../etc/passwd"), NOT_FOUND)
    assert "folder" in await refused(download(api, "a", "sub/"), INVALID_ARGUMENT)
    assert "offset" in await refused(download(api, "a", "model.pt", offset=len(big) + 1), INVALID_ARGUMENT)
    (tmp_path / "a" / "model.pt").unlink()  # recorded, but gone from the storage
    assert "not in its storage" in await refused(download(api, "a", "model.pt"), NOT_FOUND)


async def test_downloads_through_the_gateway_from_s3(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, s3_server: S3Server
) -> None:
    storage = s3_server.storage(prefix="ckpts")
    await given_experiment(api, gateway, event_store, storage)
    big = b"0123456789" * 150_000
    s3_server.client().put_object(Bucket=storage["bucket"], Key="ckpts/a/model.pt", Body=big)
    await report(api, 1, "a", 10, files={"model.pt": big})
    assert await download(api, "a", "model.pt") == (big, len(big))
    assert await download(api, "a", "model.pt", offset=1_000_000) == (big[1_000_000:], len(big))


@pytest.mark.parametrize("uuid", ["", "nope"])
async def test_a_download_of_no_checkpoint_is_refused(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, uuid: str
) -> None:
    code = INVALID_ARGUMENT if not uuid else NOT_FOUND
    await refused(download(api, uuid, "model.pt"), code)
