"""The SDK's calls under Determined 0.38's names against a module-wide real gateway (real
nats-server and PostgreSQL): experiment edits and listing filters, trials and their metrics,
a checkpoint's metadata edits and the metrics of the trials that use it, users; and, at the
gateway, a warm start from another trial resolved at creation and a validation refused for
an adaptive search. The test plays the searcher and the trials (their events and reports);
the SDK is synchronous, so it runs in a worker thread while the gateway serves on the
test's event loop."""

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from support import module_gateway
from support.security_gateway import PASSWORD, SECRET, logged_in, refused
from test_gateway import given_trial, stored

from determined.experimental import client
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub

T = TypeVar("T")
SEARCHER = {"name": "single", "metric": "loss", "smaller_is_better": True, "max_length": 30}


async def sdk(call: Callable[..., T], *args: object, **kwargs: object) -> T:
    return await asyncio.to_thread(call, *args, **kwargs)


def admin(gateway: Gateway) -> client.Determined:
    """The admin's SDK connection (it logs in at once: make it off the event loop)."""
    return client.Determined(f"127.0.0.1:{gateway.port}", "admin", PASSWORD)


def token(trial_id: int) -> tuple[tuple[str, str], ...]:
    return (("x-allocation-token", mint_allocation_token(SECRET, trial_id, f"{trial_id}.1")),)


async def report(
    stub: api_pb2_grpc.DeterminedStub, trial_id: int, group: str, steps: int, metrics: dict[str, Any]
) -> None:
    report = events_pb2.MetricReport(group=group, steps_completed=steps, metrics_json=json.dumps(metrics))
    request = api_pb2.ReportMetricsRequest(
        trial_id=trial_id, trial_run_id=1, batch_seq=steps, reports=[report], reporter_id=f"{group}-{steps}"
    )
    await stub.ReportMetrics(request, metadata=token(trial_id))


async def checkpointed(stub: api_pb2_grpc.DeterminedStub, trial_id: int, steps: int) -> str:
    uuid_ = str(uuid.uuid4())
    request = api_pb2.ReportCheckpointRequest(
        uuid=uuid_,
        trial_id=trial_id,
        allocation_id=f"{trial_id}.1",
        steps_completed=steps,
        metadata_json=json.dumps({"steps_completed": steps}),
        resources={"model.pt": 3},
    )
    await stub.ReportCheckpoint(request, metadata=token(trial_id))
    return uuid_


async def ended(store: EventStore, gateway: Gateway, experiment_id: int) -> None:
    """The experiment COMPLETED, as the searcher ends it."""
    payload = events_pb2.ExperimentStateChanged(
        experiment_id=experiment_id, state=events_pb2.EXPERIMENT_STATE_COMPLETED
    )
    await store.append(
        Append(f"experiment/{experiment_id}", payload, f"ended-{experiment_id}"), actor="service:searcher"
    )
    assert await gateway.projector.catch_up()


async def test_experiment_edits_and_the_listings_filters(
    gateway: Gateway, store: EventStore, tmp_path: Path
) -> None:
    determined = await sdk(admin, gateway)
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text("print('hi')\n")
    config = {"entrypoint": "python3 train.py", "searcher": SEARCHER}
    first = await sdk(determined.create_experiment, {**config, "name": "first"}, tmp_path / "code")
    second = await sdk(determined.create_experiment, {**config, "name": "second"})

    await sdk(first.set_name, "renamed")
    await sdk(first.set_description, "a description")
    await sdk(first.set_notes, "# notes")
    await sdk(first.add_label, "a")
    await sdk(first.add_label, "b")
    await sdk(first.remove_label, "a")
    assert first.labels == {"b"}
    await sdk(second.set_labels, {"x", "b"})
    await sdk(first.reload)
    assert (first.name, first.description, first.notes, first.labels) == (
        "renamed",
        "a description",
        "# notes",
        {"b"},
    )

    def ids(**filters: Any) -> list[int]:
        return [e.id for e in determined.list_experiments(**filters)]

    both = [first.id, second.id]
    assert await sdk(ids, labels=["b"]) == both
    assert await sdk(ids, labels=["b", "x"]) == [second.id]
    assert await sdk(ids, name="renam") == [first.id]
    assert (
        await sdk(ids, sort_by=client.ExperimentSortBy.ID, order_by=client.OrderBy.DESCENDING) == both[::-1]
    )
    assert await sdk(
        ids, states=[client.ExperimentState.ACTIVE], users=["admin"], experiment_ids=[second.id]
    ) == [second.id]
    assert await sdk(ids, users=["nobody"]) == []

    with pytest.raises(client.APIError):  # an active experiment stays listed
        await sdk(first.archive)
    await ended(store, gateway, first.id)
    await sdk(first.archive)
    await sdk(first.reload)
    assert first.archived and first.id in await sdk(ids)  # the SDK lists archived ones too
    await sdk(first.unarchive)
    await sdk(first.reload)
    assert not first.archived

    archive = Path(await sdk(first.download_code, tmp_path / "code-of-first"))
    assert (
        archive == tmp_path / "code-of-first" / f"exp-{first.id}_model_def.tar.gz"
        and archive.stat().st_size > 0
    )

    await sdk(second.cancel)
    await sdk(second.reload)
    assert second.state is not client.ExperimentState.ACTIVE


async def test_trials_metrics_and_a_checkpoints_metadata_and_users(
    gateway: Gateway, store: EventStore, stub: api_pb2_grpc.DeterminedStub
) -> None:
    determined = await sdk(admin, gateway)
    experiment = await sdk(
        determined.create_experiment, {"entrypoint": "python3 train.py", "searcher": SEARCHER}
    )
    for trial_id in (101, 102):
        await given_trial(store, gateway, trial_id=trial_id, experiment_id=experiment.id)
    await report(stub, 101, "training", 10, {"loss": 0.9})
    await report(stub, 101, "validation", 10, {"loss": 0.5})
    await report(stub, 102, "validation", 10, {"loss": 0.3})
    await report(stub, 102, "validation", 20, {"accuracy": 0.8})  # no searcher metric: single takes it
    checkpoint_uuid = await checkpointed(stub, 101, 10)
    assert await gateway.projector.catch_up()

    assert [t.id for t in await sdk(lambda: list(experiment.iter_trials()))] == [101, 102]
    best_first = await sdk(experiment.list_trials, client.TrialSortBy.BEST_VALIDATION_METRIC)
    assert [t.id for t in best_first] == [102, 101]
    trial = best_first[1]
    assert [m.metrics for m in await sdk(lambda: list(trial.stream_metrics("training")))] == [{"loss": 0.9}]
    reports = await sdk(
        lambda: list(client.Determined.stream_trials_validation_metrics(determined, [101, 102]))
    )
    assert [(r.trial_id, r.steps_completed) for r in reports] == [(101, 10), (102, 10), (102, 20)]

    # A checkpoint's metadata: its experiment's owner (or an admin) edits it.
    checkpoint = await sdk(determined.get_checkpoint, checkpoint_uuid)
    await sdk(checkpoint.add_metadata, {"framework": "torch", "note": {"a": 1}})
    await sdk(checkpoint.remove_metadata, ["note", "absent"])
    assert checkpoint.metadata == {"steps_completed": 10, "framework": "torch"}
    await sdk(checkpoint.reload)
    assert checkpoint.metadata == {"steps_completed": 10, "framework": "torch"}

    # Users: an admin creates one, who may not edit the admin's checkpoint.
    assert (await sdk(determined.whoami)).username == "admin"
    with pytest.raises(ValueError, match="has no digit"):
        await sdk(determined.create_user, "weak", False, "NoDigitsHere")
    bob = await sdk(determined.create_user, "bob", False, "Bob-Pass1")
    assert (bob.username, bob.admin, bob.active) == ("bob", False, True)
    assert "bob" in [u.username for u in await sdk(determined.list_users)]
    assert (await sdk(determined.get_user_by_name, "bob")).user_id == bob.user_id
    as_bob = await sdk(client.Determined, f"127.0.0.1:{gateway.port}", "bob", "Bob-Pass1")
    assert await sdk(as_bob.get_session_username) == "bob"
    with pytest.raises(client.APIError) as denied:
        await sdk((await sdk(as_bob.get_checkpoint, checkpoint_uuid)).add_metadata, {"x": 1})
    assert denied.value.code == "PERMISSION_DENIED"
    await sdk(bob.deactivate)
    assert [u.username for u in await sdk(determined.list_users, False)] == ["bob"]

    # Trial 102 uses the checkpoint (as core_context.experimental says): its metrics are the checkpoint's.
    request = api_pb2.ReportCheckpointUseRequest(trial_id=102, checkpoint_uuid=checkpoint_uuid)
    await stub.ReportCheckpointUse(request, metadata=token(102))
    await stub.ReportCheckpointUse(request, metadata=token(102))  # once is enough
    assert await gateway.projector.catch_up()
    used = await sdk(lambda: list(checkpoint.get_metrics("validation")))
    assert [(m.trial_id, m.steps_completed) for m in used] == [(102, 10), (102, 20)]
    denied_use = await refused(stub.ReportCheckpointUse(request, metadata=token(101)))
    assert denied_use.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_a_warm_start_from_a_trial_records_its_latest_checkpoint(
    gateway: Gateway, store: EventStore, stub: api_pb2_grpc.DeterminedStub
) -> None:
    me = await logged_in(stub)
    source = await stub.CreateExperiment(
        api_pb2.CreateExperimentRequest(
            config_yaml=json.dumps({"entrypoint": "x", "searcher": SEARCHER}), activate=True
        ),
        metadata=me,
    )
    await given_trial(store, gateway, trial_id=201, experiment_id=source.experiment_id)
    await given_trial(store, gateway, trial_id=202, experiment_id=source.experiment_id)
    await checkpointed(stub, 201, 10)
    latest = await checkpointed(stub, 201, 20)
    assert await gateway.projector.catch_up()

    def warm_from(trial_id: int) -> api_pb2.CreateExperimentRequest:
        config = {"entrypoint": "x", "searcher": {**SEARCHER, "source_trial_id": trial_id}}
        return api_pb2.CreateExperimentRequest(config_yaml=json.dumps(config), activate=True)

    warm = await stub.CreateExperiment(warm_from(201), metadata=me)
    [created] = [
        e.experiment_created
        for e in await stored(store, "experiment")
        if e.HasField("experiment_created") and e.experiment_created.experiment_id == warm.experiment_id
    ]
    assert created.source_trial_checkpoint_uuid == latest
    for trial_id, reason in ((202, "trial 202 has no checkpoint"), (999, "trial 999 not found")):
        error = await refused(stub.CreateExperiment(warm_from(trial_id), metadata=me))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and reason in (error.details() or "")


async def test_an_adaptive_search_refuses_a_validation_without_its_metric(
    gateway: Gateway, store: EventStore, stub: api_pb2_grpc.DeterminedStub
) -> None:
    me = await logged_in(stub)
    searcher = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 2,
        "max_time": 100,
        "time_metric": "batches",
    }
    created = await stub.CreateExperiment(
        api_pb2.CreateExperimentRequest(
            config_yaml=json.dumps({"entrypoint": "x", "searcher": searcher}), activate=True
        ),
        metadata=me,
    )
    await given_trial(store, gateway, trial_id=301, experiment_id=created.experiment_id)
    error = await refused(report(stub, 301, "validation", 10, {"loss": 0.5}))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lacks 'batches', which the experiment's adaptive search decides from" in (error.details() or "")
    await report(stub, 301, "validation", 10, {"loss": 0.5, "batches": 10})
    await report(stub, 301, "training", 20, {"accuracy": 0.5})
