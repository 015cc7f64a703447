"""The decider shell's clock tick, on both event logs: a core whose
decisions wait on time alone gets them when the log is quiet, and a tick
never costs the read it interrupts."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from determined.proto import events_pb2
from services.common.decider import PureCore, Shell
from services.common.envelope import Append, Envelope, payload_of
from services.common.eventlog import EventLog

DELAY_NS = 300_000_000


@dataclass(frozen=True)
class Waiting:
    now_ns: int = 0
    # Experiment id -> when it was created: it gets a trial DELAY_NS later.
    created_ns: dict[int, int] = field(default_factory=dict)


def evolve(state: Waiting, envelope: Envelope) -> Waiting:
    state = tick(state, envelope.occurred_at_ns)
    event = payload_of(envelope)
    if isinstance(event, events_pb2.ExperimentCreated):
        return replace(state, created_ns={**state.created_ns, event.experiment_id: envelope.occurred_at_ns})
    if isinstance(event, events_pb2.TrialCreated):
        return replace(
            state, created_ns={k: v for k, v in state.created_ns.items() if k != event.experiment_id}
        )
    return state


def tick(state: Waiting, now_ns: int) -> Waiting:
    return replace(state, now_ns=max(state.now_ns, now_ns))


def decide(state: Waiting) -> list[Append]:
    return [
        Append(f"trial/{e}", events_pb2.TrialCreated(trial_id=e, experiment_id=e), f"trial-{e}")
        for e, created_ns in sorted(state.created_ns.items())
        if state.now_ns >= created_ns + DELAY_NS
    ]


def delayed_trials_core(with_tick: bool = True) -> PureCore[Waiting]:
    return PureCore(
        ("experiment_created", "trial_created"), Waiting, evolve, decide, tick=tick if with_tick else None
    )


def created(experiment_id: int) -> Append:
    return Append(
        f"experiment/{experiment_id}",
        events_pb2.ExperimentCreated(experiment_id=experiment_id),
        f"create-{experiment_id}",
    )


async def trials(store: EventLog) -> list[Envelope]:
    return [stored.envelope async for stored in store.read(["trial"], follow=False)]


async def until(condition: Callable[[], Awaitable[bool]], deadline_s: float = 20.0) -> bool:
    end = time.monotonic() + deadline_s
    while not await condition():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.05)
    return True


async def running(shell: Shell[Waiting]) -> asyncio.Task[None]:
    ready = asyncio.Event()

    async def caught_up() -> None:
        ready.set()

    shell.on_caught_up = caught_up
    task = asyncio.create_task(shell.run())
    await ready.wait()
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_decision_that_waits_on_time_alone_comes_from_a_tick(event_log: EventLog) -> None:
    shell = await running(Shell(event_log, delayed_trials_core(), "service:test", tick_s=0.1))
    try:
        await event_log.append(created(1), actor="user:test")
        assert await until(lambda: _count(event_log, 1))
    finally:
        await stopped(shell)
    [trial] = await trials(event_log)
    # It answers the clock, not the creation folded a while before.
    assert (trial.event_id, trial.causation_id) == ("trial-1", "")


async def test_without_tick_s_the_shell_never_ticks(event_log: EventLog) -> None:
    shell = await running(Shell(event_log, delayed_trials_core(), "service:test"))
    try:
        await event_log.append(created(1), actor="user:test")
        assert not await until(lambda: _count(event_log, 1), deadline_s=1.0)
        # The next event folded brings the clock forward: decided then.
        await event_log.append(created(2), actor="user:test")
        assert await until(lambda: _count(event_log, 1))
    finally:
        await stopped(shell)


async def test_a_core_without_tick_is_unchanged_by_ticks(event_log: EventLog) -> None:
    shell = await running(Shell(event_log, delayed_trials_core(with_tick=False), "service:test", tick_s=0.05))
    try:
        await event_log.append(created(1), actor="user:test")
        assert not await until(lambda: _count(event_log, 1), deadline_s=1.0)
    finally:
        await stopped(shell)


async def test_ticks_between_events_lose_none_of_them(event_log: EventLog) -> None:
    shell = await running(Shell(event_log, delayed_trials_core(), "service:test", tick_s=0.02))
    try:
        for experiment_id in range(1, 6):
            await event_log.append(created(experiment_id), actor="user:test")
            await asyncio.sleep(0.15)  # several ticks while the read waits
        assert await until(lambda: _count(event_log, 5))
        await asyncio.sleep(0.5)
    finally:
        await stopped(shell)
    assert sorted(t.event_id for t in await trials(event_log)) == [f"trial-{e}" for e in range(1, 6)]


async def test_a_stopped_shell_leaves_no_read_behind(event_log: EventLog) -> None:
    before = asyncio.all_tasks()
    shell = await running(Shell(event_log, delayed_trials_core(), "service:test", tick_s=0.02))
    await asyncio.sleep(0.2)  # waiting on a read across ticks
    await stopped(shell)
    assert asyncio.all_tasks() - before == set()


async def _count(store: EventLog, expected: int) -> bool:
    return len(await trials(store)) >= expected
