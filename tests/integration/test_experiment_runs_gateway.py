"""det experiment cancel and continue through a module-wide gateway and the
searcher's shells over a real nats-server and PostgreSQL; the test plays the
scheduler and the agent (a run's stop acknowledgement, checkpoint and exit).
A canceled experiment's running trial is asked to stop and the experiment
ends CANCELED; a continued one's trial runs again from its checkpoint under
the new config; and what makes no sense is refused, over gRPC and REST."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from support import module_gateway
from support.security_gateway import logged_in
from test_gateway import stored

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.service import run_shells
from services.common.settings import CommonSettings
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store
stub = module_gateway.stub
web = module_gateway.web

DEADLINE_S = 60.0
Metadata = tuple[tuple[str, str], ...]
T = TypeVar("T")

CONFIG = """
entrypoint: python3 train.py
searcher: {%s, metric: loss, max_length: {batches: 50}}
"""


@pytest.fixture(scope="module")
async def searcher(store: EventStore, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    """The search and trial lifecycle cores, as `python -m services.searcher` runs them."""
    ready = tmp_path_factory.mktemp("searcher") / "ready"
    settings = CommonSettings(namespace=store.namespace, ready_file=ready)
    task = asyncio.create_task(
        run_shells(store, settings, SearcherCore(), TrialLifecycleCore(), name="searcher", tick_s=0.2)
    )
    await until(lambda: _true(ready.exists()), "the searcher to get ready")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _true(value: bool) -> bool:
    return value


@pytest.fixture(scope="module")
async def admin(stub: api_pb2_grpc.DeterminedStub, searcher: None) -> Metadata:
    return await logged_in(stub)


async def until(condition: Callable[[], Awaitable[T]], what: str) -> T:
    deadline = time.monotonic() + DEADLINE_S
    while not (found := await condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return found


async def create(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, searcher: str = "name: single", **kw: Any
) -> int:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG % searcher, **{"activate": True, **kw})
    return (await stub.CreateExperiment(request, metadata=admin)).experiment_id


async def run_requested(store: EventStore, experiment_id: int, run_id: int) -> events_pb2.AllocationRequested:
    """The request for run `run_id` of the experiment's (first) trial."""

    async def requested() -> events_pb2.AllocationRequested | None:
        found = [e.allocation_requested for e in await stored(store, "allocation")]
        launches = (
            r for r in found if r.trial.experiment_id == experiment_id and r.trial.trial_run_id == run_id
        )
        return next(launches, None)

    return await until(requested, f"run {run_id} of experiment {experiment_id} to be requested")


async def experiment_in(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, experiment_id: int, state: str
) -> api_pb2.GetExperimentResponse:
    async def reached() -> api_pb2.GetExperimentResponse | None:
        found = await stub.GetExperiment(
            api_pb2.GetExperimentRequest(experiment_id=experiment_id), metadata=admin
        )
        return found if found.experiment.state == state else None

    return await until(reached, f"experiment {experiment_id} to be {state}")


async def append(store: EventStore, aggregate: str, payload: Any, msg_id: str) -> None:
    await store.append(Append(aggregate, payload, msg_id), actor="service:agent")


async def exit_run(
    store: EventStore, allocation_id: str, *, acknowledged: bool = False, exit_code: int = 0
) -> None:
    trial_id = int(allocation_id.split(".")[0])
    if acknowledged:
        ack = events_pb2.AllocationStopAcknowledged(allocation_id=allocation_id, task_id=str(trial_id))
        await append(store, f"allocation/{allocation_id}", ack, f"test-ack-{allocation_id}")
    exited = events_pb2.AllocationExited(
        allocation_id=allocation_id,
        trial_id=trial_id,
        agent_id="a",
        exit_code=exit_code,
        task_id=str(trial_id),
    )
    await append(store, f"allocation/{allocation_id}", exited, f"test-exit-{allocation_id}")


async def test_a_continued_experiment_trains_its_trial_again_from_its_checkpoint(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, admin: Metadata
) -> None:
    experiment_id = await create(stub, admin)
    first = await run_requested(store, experiment_id, 1)
    trial_id = first.trial.trial_id
    checkpoint = events_pb2.CheckpointReported(
        uuid=f"c0ffee-{experiment_id}",
        trial_id=trial_id,
        experiment_id=experiment_id,
        allocation_id=first.allocation_id,
        steps_completed=50,
    )
    await append(store, f"checkpoint/{checkpoint.uuid}", checkpoint, f"test-checkpoint-{experiment_id}")
    await exit_run(store, first.allocation_id)
    ended = await experiment_in(stub, admin, experiment_id, "COMPLETED")
    assert ended.experiment.ended_at_ns

    request = api_pb2.ContinueExperimentRequest(
        experiment_id=experiment_id, override_config_yaml="searcher:\n  max_length:\n    batches: 80\n"
    )
    continued = await stub.ContinueExperiment(request, metadata=admin)
    assert (continued.experiment.state, continued.experiment.ended_at_ns) == ("ACTIVE", 0)
    second = await run_requested(store, experiment_id, 2)
    assert (second.trial.latest_checkpoint, second.trial.steps_completed) == (checkpoint.uuid, 50)
    assert json.loads(second.trial.config_json)["searcher"]["max_length"] == {"batches": 80}

    async def trial_active() -> bool:
        request = api_pb2.GetExperimentRequest(experiment_id=experiment_id)
        found = await stub.GetExperiment(request, metadata=admin)
        return [t.state for t in found.trials] == ["ACTIVE"]

    await until(trial_active, "the trial to be ACTIVE again")
    await exit_run(store, second.allocation_id)
    again = await experiment_in(stub, admin, experiment_id, "COMPLETED")
    assert [t.state for t in again.trials] == ["COMPLETED"]
    assert json.loads(again.experiment.config_json)["searcher"]["max_length"] == {"batches": 80}


async def test_a_canceled_experiments_trial_stops_gracefully_and_it_ends_canceled(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, admin: Metadata, web: httpx.AsyncClient
) -> None:
    experiment_id = await create(stub, admin)
    run = await run_requested(store, experiment_id, 1)
    headers = dict(admin)
    answer = await web.post(f"/api/v1/experiments/{experiment_id}/cancel", headers=headers)
    assert (answer.status_code, answer.json()) == (200, {"unchangedReason": ""})
    found = await stub.GetExperiment(
        api_pb2.GetExperimentRequest(experiment_id=experiment_id), metadata=admin
    )
    assert found.experiment.state == "STOPPING_CANCELED"

    async def stop_asked() -> bool:
        stops = [e.allocation_stop_requested for e in await stored(store, "allocation")]
        return any(s.allocation_id == run.allocation_id and s.reason == "experiment canceled" for s in stops)

    await until(stop_asked, "the run to be asked to stop")
    await exit_run(store, run.allocation_id, acknowledged=True)
    ended = await experiment_in(stub, admin, experiment_id, "CANCELED")
    assert ended.experiment.end_reason == "canceled by user"
    assert [t.state for t in ended.trials] == ["CANCELED"]
    again = await stub.CancelExperiment(
        api_pb2.CancelExperimentRequest(experiment_id=experiment_id), metadata=admin
    )
    assert again.unchanged_reason == f"Experiment {experiment_id} is already CANCELED: nothing to cancel"


async def refused(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    return error.value.code(), error.value.details() or ""


async def test_what_makes_no_sense_is_refused_saying_why(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, admin: Metadata, web: httpx.AsyncClient
) -> None:
    running = await create(stub, admin)
    run = await run_requested(store, running, 1)
    proceed = stub.ContinueExperiment
    code, said = await refused(
        proceed(api_pb2.ContinueExperimentRequest(experiment_id=running), metadata=admin)
    )
    assert (code, said) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        f"experiment {running} is ACTIVE: only an ended experiment (COMPLETED, CANCELED or ERROR) can be continued",
    )
    missing = api_pb2.ContinueExperimentRequest(experiment_id=999)
    assert await refused(proceed(missing, metadata=admin)) == (
        grpc.StatusCode.NOT_FOUND,
        "experiment 999 not found",
    )
    cancel_missing = stub.CancelExperiment(api_pb2.CancelExperimentRequest(experiment_id=999), metadata=admin)
    assert (await refused(cancel_missing))[0] == grpc.StatusCode.NOT_FOUND

    random = await create(stub, admin, "name: random, max_trials: 2", activate=False)  # no trials
    await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=random), metadata=admin)
    await experiment_in(stub, admin, random, "CANCELED")
    code, said = await refused(
        proceed(api_pb2.ContinueExperimentRequest(experiment_id=random), metadata=admin)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "uses the 'random' searcher" in said

    await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=running), metadata=admin)
    await exit_run(store, run.allocation_id)
    await experiment_in(stub, admin, running, "CANCELED")
    for override, problem in (
        ("max_restarts: -3", "invalid experiment config"),
        ("[1]", "must be a mapping"),
    ):
        request = api_pb2.ContinueExperimentRequest(experiment_id=running, override_config_yaml=override)
        code, said = await refused(proceed(request, metadata=admin))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and problem in said, said

    headers = dict(admin)
    answer = await web.post("/api/v1/experiments/continue", json={"id": "x"}, headers=headers)
    assert answer.status_code == 400 and "id must be an experiment id" in answer.json()["message"]
    answer = await web.post("/api/v1/experiments/continue", json={"id": 999}, headers=headers)
    assert answer.status_code == 404
    answer = await web.post("/api/v1/experiments/continue", json={"id": running}, headers=headers)
    assert answer.status_code == 200 and answer.json()["experiment"]["state"] == "STATE_ACTIVE"

    # Killed before it was continued, it can be killed again (the kill is not taken for the first).
    second = await run_requested(store, running, 2)
    killed = await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=running), metadata=admin)
    assert killed.unchanged_reason == ""
    await exit_run(store, second.allocation_id)
    await experiment_in(stub, admin, running, "CANCELED")
    kills = [e for e in await stored(store, "experiment") if e.HasField("experiment_kill_requested")]
    assert len([e for e in kills if e.experiment_kill_requested.experiment_id == running]) == 2


async def test_a_continued_trial_restarts_from_0_and_can_be_killed_again(
    stub: api_pb2_grpc.DeterminedStub, store: EventStore, admin: Metadata
) -> None:
    experiment_id = await create(stub, admin)
    first = await run_requested(store, experiment_id, 1)
    trial_id = first.trial.trial_id
    await exit_run(store, first.allocation_id, exit_code=1)  # failed: run again
    second = await run_requested(store, experiment_id, 2)
    kill = api_pb2.KillTrialRequest(trial_id=trial_id)
    assert (await stub.KillTrial(kill, metadata=admin)).unchanged_reason == ""
    again = await stub.KillTrial(kill, metadata=admin)
    assert again.unchanged_reason == f"Trial {trial_id} is being killed already: nothing to kill"
    await exit_run(store, second.allocation_id, exit_code=137)
    await until(lambda: ended(stub, admin, experiment_id), "the killed experiment to end")
    trial = api_pb2.GetTrialRequest(trial_id=trial_id)
    assert (await stub.GetTrial(trial, metadata=admin)).trial.restarts == 1

    await stub.ArchiveExperiment(
        api_pb2.ArchiveExperimentRequest(experiment_id=experiment_id), metadata=admin
    )
    proceed = api_pb2.ContinueExperimentRequest(experiment_id=experiment_id)
    code, said = await refused(stub.ContinueExperiment(proceed, metadata=admin))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and f"experiment {experiment_id} is archived" in said
    await stub.UnarchiveExperiment(
        api_pb2.UnarchiveExperimentRequest(experiment_id=experiment_id), metadata=admin
    )
    await stub.ContinueExperiment(proceed, metadata=admin)
    third = await run_requested(store, experiment_id, 3)
    assert (await stub.GetTrial(trial, metadata=admin)).trial.restarts == 0  # Determined zeroes them
    # Killed before the continue, the trial is killed again: not taken for the first kill.
    assert (await stub.KillTrial(kill, metadata=admin)).unchanged_reason == ""
    await exit_run(store, third.allocation_id, exit_code=137)
    await until(lambda: ended(stub, admin, experiment_id), "the killed experiment to end again")
    kills = [
        e.trial_kill_requested for e in await stored(store, "trial") if e.HasField("trial_kill_requested")
    ]
    assert [k.trial_id for k in kills].count(trial_id) == 2


async def ended(stub: api_pb2_grpc.DeterminedStub, admin: Metadata, experiment_id: int) -> bool:
    request = api_pb2.GetExperimentRequest(experiment_id=experiment_id)
    found = await stub.GetExperiment(request, metadata=admin)
    return found.experiment.state in ("COMPLETED", "CANCELED", "ERROR")


async def test_a_detached_run_is_neither_paused_nor_activated(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata
) -> None:
    config = "name: by-hand\nsearcher: {name: single, metric: loss}\n"
    create = api_pb2.CreateExperimentRequest(config_yaml=config, activate=True, unmanaged=True)
    experiment_id = (await stub.CreateExperiment(create, metadata=admin)).experiment_id
    pause = stub.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=experiment_id), metadata=admin)
    assert await refused(pause) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        f"experiment {experiment_id} is a detached run: it cannot be paused",
    )
    activate = api_pb2.ActivateExperimentRequest(experiment_id=experiment_id)
    code, said = await refused(stub.ActivateExperiment(activate, metadata=admin))
    assert (code, said.endswith("it cannot be activated")) == (grpc.StatusCode.FAILED_PRECONDITION, True)
