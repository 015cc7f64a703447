"""Searcher, scheduler and agent together against a real nats-server: an
experiment goes from ExperimentCreated to its terminal state."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from support.log_polling import wait_for_events

from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.common.envelope import Append, Envelope, payload_of
from services.common.eventstore import EventStore
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler
from services.searcher.__main__ import SearcherSettings
from services.searcher.__main__ import run as run_searcher

ES, TS = ev.ExperimentState, ev.TrialState
DEADLINE_S = 90.0  # a bound against a hang, not a speed check: starting the torch launcher takes long on a loaded machine


@asynccontextmanager
async def cluster(
    settings: dict[str, object], work_dir: Path, **agent: object
) -> AsyncIterator[dict[str, asyncio.Task[None]]]:
    """Searcher, scheduler and agent-1 (with more agent settings if given)."""
    agent_settings = AgentSettings(
        **settings, agent_id="agent-1", agent_work_dir=work_dir, agent_kill_grace_s=2, **agent
    )
    tasks = {
        "searcher": asyncio.create_task(run_searcher(SearcherSettings(**settings))),
        "scheduler": asyncio.create_task(run_scheduler(SchedulerSettings(**settings))),
        "agent": asyncio.create_task(run_agent(agent_settings)),
    }
    try:
        yield tasks
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)


def config(entrypoint: object, **extra: object) -> dict[str, object]:
    return {
        "searcher": {"name": "single", "metric": "loss"},
        "hyperparameters": {"lr": {"type": "const", "val": 0.5}},
        "resources": {"slots_per_trial": 1},
        "reproducibility": {"experiment_seed": 3},
        "max_restarts": 5,
        "entrypoint": entrypoint,
        **extra,
    }


async def create_experiment(
    store: EventStore, experiment_id: int, cfg: dict[str, object], context_hash: str = ""
) -> None:
    created = ev.ExperimentCreated(
        experiment_id=experiment_id,
        name="e",
        owner="determined",
        config_json=json.dumps(cfg),
        context_hash=context_hash,
        activate=True,
    )
    append = Append(
        f"experiment/{experiment_id}", created, f"experiment-created-{experiment_id}", expected_version=0
    )
    await store.append(append, actor="user:determined")


async def wait_for(store: EventStore, found: Callable[[list[Envelope]], bool]) -> list[Envelope]:
    """The whole log once `found` holds of it, or a failure at the deadline."""
    return await wait_for_events(store, found, DEADLINE_S, poll_s=0.05)


def payloads(envelopes: list[Envelope], kind: type) -> list:
    return [p for e in envelopes if isinstance(p := payload_of(e), kind)]


def experiment_ended(envelopes: list[Envelope]) -> bool:
    return bool(payloads(envelopes, ev.ExperimentStateChanged))


async def trial_logs(store: EventStore, trial_id: int, allocations: int = 1) -> list[ev.LogBatch]:
    """The trial's log batches once `allocations` of its allocations ended.

    Polled: a read that is not following can come back empty right after a
    publish (the new consumer may not count its pending messages yet)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        batches = [stored.batch async for stored in store.logs.read(trial_id, follow=False)]
        if sum(b.allocation_ended for b in batches) >= allocations:
            return batches
        assert time.monotonic() < deadline, f"timed out waiting for logs; got {batches}"
        await asyncio.sleep(0.05)


async def test_an_experiment_runs_to_completion_with_its_logs(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with cluster(settings, tmp_path):
        await create_experiment(
            event_store, 1, config("""python3 -c "import os; print('hi', os.environ['DET_HPARAMS'])" """)
        )
        envelopes = await wait_for(event_store, experiment_ended)
    [changed] = payloads(envelopes, ev.ExperimentStateChanged)
    assert changed.state == ES.EXPERIMENT_STATE_COMPLETED
    [ended] = payloads(envelopes, ev.TrialEnded)
    assert ended.state == TS.TRIAL_STATE_COMPLETED
    [started] = payloads(envelopes, ev.AllocationStarted)
    assert started.pid > 0 and started.allocation_id == "1.1"
    batches = await trial_logs(event_store, 1)
    assert any(line.log == 'hi {"lr": 0.5}' and line.stdtype == "stdout" for b in batches for line in b.lines)
    assert batches[-1].allocation_ended


async def test_a_failing_trial_is_restarted_then_errors_the_experiment(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, config(["sh", "-c", "echo oops >&2; exit 3"], max_restarts=1))
        envelopes = await wait_for(event_store, experiment_ended)
    assert [a.allocation_id for a in payloads(envelopes, ev.AllocationAssigned)] == ["1.1", "1.2"]
    assert [x.exit_code for x in payloads(envelopes, ev.AllocationExited)] == [3, 3]
    [ended] = payloads(envelopes, ev.TrialEnded)
    assert ended.state == TS.TRIAL_STATE_ERROR and "code 3" in ended.reason
    [changed] = payloads(envelopes, ev.ExperimentStateChanged)
    assert changed.state == ES.EXPERIMENT_STATE_ERROR
    lines = [line for b in await trial_logs(event_store, 1, allocations=2) for line in b.lines]
    assert [(line.stdtype, line.log) for line in lines] == [("stderr", "oops")] * 2


async def test_killing_a_running_experiment_cancels_it(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with cluster(settings, tmp_path):
        await create_experiment(event_store, 1, config("sleep 60"))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        kill = Append("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "kill-1")
        await event_store.append(kill, actor="user:determined")
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.killed
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_CANCELED]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [ES.EXPERIMENT_STATE_CANCELED]


async def test_a_restarted_scheduler_rebuilds_its_state_and_carries_on(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    searcher = {"name": "random", "metric": "loss", "max_trials": 2, "max_concurrent_trials": 2}
    cfg = config(f"while [ ! -f {go} ]; do sleep 0.05; done", searcher=searcher)
    async with cluster(settings, tmp_path / "work") as tasks:
        await create_experiment(event_store, 1, cfg)
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        tasks["scheduler"].cancel()
        await asyncio.gather(tasks["scheduler"], return_exceptions=True)
        tasks["scheduler"] = asyncio.create_task(run_scheduler(SchedulerSettings(**settings)))
        go.touch()
        envelopes = await wait_for(event_store, experiment_ended)
    assert [a.allocation_id for a in payloads(envelopes, ev.AllocationAssigned)] == ["1.1", "2.1"]
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_COMPLETED] * 2
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
