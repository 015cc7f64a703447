"""The searcher's and the scheduler's shells (their cores, run as their
services run them: services/common/service.py `run_shells`) on both event
logs, a real nats-server's and the in-memory one. The test plays the user
and the agent: it appends what they would, and reads what the services
decide."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from google.protobuf.message import Message
from support.log_polling import wait_for_events

from determined.proto import events_pb2 as ev
from services.agent.core import agent_registered
from services.common.envelope import Append, Envelope, payload_of
from services.common.eventlog import EventLog
from services.common.service import run_shells
from services.common.settings import CommonSettings
from services.scheduler.__main__ import TICK_S
from services.scheduler.core import SchedulerCore
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore

ES, TS = ev.ExperimentState, ev.TrialState
DEADLINE_S = 30.0


@asynccontextmanager
async def running(
    log: EventLog, folder: Path, *services: str
) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """The named services' shells ("searcher", "scheduler") on `log`, once
    each is ready (following the log: what it folds next, it answers), until
    the block ends."""
    tasks = {name: await started(log, name, folder / f"{name}.ready") for name in services}
    try:
        yield tasks
    finally:
        await stopped(*tasks.values())


async def started(log: EventLog, name: str, ready_file: Path) -> asyncio.Task[None]:
    ready_file.unlink(missing_ok=True)
    task = asyncio.create_task(_shells(log, name, ready_file))
    deadline = time.monotonic() + DEADLINE_S
    while not ready_file.exists():
        assert time.monotonic() < deadline and not task.done(), f"{name} did not get ready"
        await asyncio.sleep(0.02)
    return task


async def _shells(log: EventLog, name: str, ready_file: Path) -> None:
    settings = CommonSettings(namespace=log.namespace, ready_file=ready_file)
    if name == "searcher":
        await run_shells(log, settings, SearcherCore(), TrialLifecycleCore(), name="searcher")
    else:
        await run_shells(log, settings, SchedulerCore(), name="scheduler", tick_s=TICK_S)


async def stopped(*tasks: asyncio.Task[None]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def create_experiment(log: EventLog, experiment_id: int, **searcher: object) -> None:
    config = {
        "searcher": {"name": "single", "metric": "loss", **searcher},
        "hyperparameters": {"lr": {"type": "const", "val": 0.5}},
        "reproducibility": {"experiment_seed": 3},
        "max_restarts": 0,
        "entrypoint": "python3 train.py",
    }
    created = ev.ExperimentCreated(
        experiment_id=experiment_id,
        name="e",
        owner="determined",
        config_json=json.dumps(config),
        activate=True,
    )
    append = Append(f"experiment/{experiment_id}", created, f"create-{experiment_id}", expected_version=0)
    await log.append(append, actor="user:determined")


async def register_agent(log: EventLog, agent_id: str = "a", slots: int = 1) -> None:
    cpu_slots = [ev.Slot(slot_id=i, type="cpu") for i in range(slots)]
    await log.append(agent_registered(agent_id, agent_id, cpu_slots, "boot-1"), actor=f"agent:{agent_id}")


async def exit_allocation(log: EventLog, allocation_id: str, **how: object) -> None:
    trial_id = allocation_id.split(".")[0]
    exited = ev.AllocationExited(allocation_id=allocation_id, trial_id=int(trial_id), task_id=trial_id, **how)
    await log.append(Append(f"allocation/{allocation_id}", exited, f"exit-{allocation_id}"), actor="agent:a")


async def wait_for(log: EventLog, found: Callable[[list[Envelope]], bool]) -> list[Envelope]:
    """The whole log once `found` holds of it, or a failure at the deadline."""
    return await wait_for_events(log, found, DEADLINE_S, poll_s=0.02)


def payloads(envelopes: list[Envelope], kind: type[Message]) -> list:
    return [p for e in envelopes if isinstance(p := payload_of(e), kind)]


def having(kind: type[Message], count: int = 1) -> Callable[[list[Envelope]], bool]:
    return lambda envelopes: len(payloads(envelopes, kind)) >= count


async def test_an_experiment_is_searched_scheduled_and_completed(event_log: EventLog, tmp_path: Path) -> None:
    async with running(event_log, tmp_path, "searcher", "scheduler"):
        await register_agent(event_log)
        await create_experiment(event_log, 1)
        envelopes = await wait_for(event_log, having(ev.AllocationAssigned))
        [assigned] = payloads(envelopes, ev.AllocationAssigned)
        assert [(p.agent_id, list(p.slot_ids)) for p in assigned.placements] == [("a", [0])]
        await exit_allocation(event_log, assigned.allocation_id, exit_code=0)
        envelopes = await wait_for(event_log, having(ev.ExperimentStateChanged))
    assert [t.trial_id for t in payloads(envelopes, ev.TrialCreated)] == [1]
    assert [r.allocation_id for r in payloads(envelopes, ev.AllocationRequested)] == ["1.1"]
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_COMPLETED]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    decided = [e for e in envelopes if e.actor.startswith("service:")]
    assert all(e.causation_id for e in decided)  # each answers the event that led to it
    # Two chains: what the creation led to, and what the agent's report of the exit led to.
    assert {e.correlation_id for e in decided} == {"create-1", "exit-1.1"}
    assert len({e.event_id for e in envelopes}) == len(envelopes)


async def test_killing_an_experiment_cancels_its_running_trial(event_log: EventLog, tmp_path: Path) -> None:
    async with running(event_log, tmp_path, "searcher", "scheduler"):
        await register_agent(event_log)
        await create_experiment(event_log, 1)
        await wait_for(event_log, having(ev.AllocationAssigned))
        kill = Append("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "kill-1")
        await event_log.append(kill, actor="user:determined")
        envelopes = await wait_for(event_log, having(ev.AllocationKillRequested))
        assert [k.allocation_id for k in payloads(envelopes, ev.AllocationKillRequested)] == ["1.1"]
        await exit_allocation(event_log, "1.1", exit_code=137, killed=True)
        envelopes = await wait_for(event_log, having(ev.ExperimentStateChanged))
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_CANCELED]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [ES.EXPERIMENT_STATE_CANCELED]


async def test_a_restarted_scheduler_rebuilds_its_state_and_carries_on(
    event_log: EventLog, tmp_path: Path
) -> None:
    """Two trials on one slot: the scheduler is stopped while the first runs;
    restarted, it knows the slot is held (the second waits), and gives it to
    the second once the first exits."""
    async with running(event_log, tmp_path, "searcher", "scheduler") as tasks:
        await register_agent(event_log)
        await create_experiment(event_log, 1, name="random", max_trials=2, max_concurrent_trials=2)
        await wait_for(event_log, having(ev.AllocationRequested, 2))
        envelopes = await wait_for(event_log, having(ev.AllocationAssigned))
        await stopped(tasks["scheduler"])
        # Once ready (caught up) it has decided on all it knows.
        tasks["scheduler"] = await started(event_log, "scheduler", tmp_path / "scheduler.ready")
        envelopes = await wait_for(event_log, having(ev.AllocationAssigned))
        assert [a.allocation_id for a in payloads(envelopes, ev.AllocationAssigned)] == ["1.1"]
        await exit_allocation(event_log, "1.1", exit_code=0)
        envelopes = await wait_for(event_log, having(ev.AllocationAssigned, 2))
        await exit_allocation(event_log, "2.1", exit_code=0)
        envelopes = await wait_for(event_log, having(ev.ExperimentStateChanged))
    assert [a.allocation_id for a in payloads(envelopes, ev.AllocationAssigned)] == ["1.1", "2.1"]
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_COMPLETED] * 2
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
