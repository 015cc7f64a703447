"""Snapshots of a decider's state (services/common/snapshots.py), on both
event logs (a real nats-server's and the in-memory one): a shell
restarted from one folds only what came after it, and ends in the state a
replay from sequence 1 gives; a snapshot of other code, or a damaged one, is
ignored."""

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, cast

from support.golden_log import golden_log

from determined.proto import events_pb2
from services.common.decider import PureCore, Shell
from services.common.envelope import Append, Envelope
from services.common.eventlog import SNAPSHOTS_BUCKET, EventLog, StoredEvent
from services.common.snapshots import Snapshots
from services.scheduler.core import SchedulerCore
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore


class Counting:
    """A core that counts the events it folds (and decides nothing itself)."""

    def __init__(self, core: Any) -> None:
        self.core, self.kinds, self.folded = core, core.kinds, 0

    def initial_state(self) -> Any:
        return self.core.initial_state()

    def evolve(self, state: Any, envelope: Envelope) -> Any:
        self.folded += 1
        return self.core.evolve(state, envelope)

    def decide(self, state: Any) -> list[Append]:
        return list(self.core.decide(state))


def trial_ids() -> PureCore[tuple[int, ...]]:
    return PureCore(
        ("trial_created",), tuple, lambda state, e: (*state, e.trial_created.trial_id), lambda _: []
    )


async def caught_up_state(store: EventLog, core: Any, snapshots: Snapshots | None) -> Any:
    """Runs a shell until it has caught up; its state then, once its snapshot is saved."""
    states: list[Any] = []
    ready = asyncio.Event()

    async def seen(state: Any) -> list[Append]:
        states.append(state)
        return []

    async def caught_up() -> None:
        ready.set()

    shell = Shell(store, core, "service:test", on_state=seen, on_caught_up=caught_up, snapshots=snapshots)
    running = asyncio.create_task(shell.run())
    try:
        await asyncio.wait_for(ready.wait(), 60)
        await asyncio.sleep(0.3)  # the snapshot of what it caught up with
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    return states[-1] if states else None


async def created(store: EventLog, *trial_ids: int) -> None:
    for trial_id in trial_ids:
        payload = events_pb2.TrialCreated(trial_id=trial_id)
        await store.append(Append(f"trial/{trial_id}", payload, f"trial-{trial_id}"), actor="service:test")


async def append_log(store: EventLog, envelopes: list[Envelope]) -> None:
    for envelope in envelopes:
        field = envelope.WhichOneof("payload") or ""
        append = Append(envelope.aggregate, getattr(envelope, field), envelope.event_id)
        await store.append(append, actor=envelope.actor)


async def test_a_restart_folds_only_what_came_after_the_snapshot(event_log: EventLog) -> None:
    snapshots = Snapshots(event_log, "test")
    await created(event_log, 1, 2, 3)
    first = Counting(trial_ids())
    assert await caught_up_state(event_log, first, snapshots) == (1, 2, 3)
    assert first.folded == 3
    await created(event_log, 4, 5)
    restarted = Counting(trial_ids())
    assert await caught_up_state(event_log, restarted, snapshots) == (1, 2, 3, 4, 5)
    assert restarted.folded == 2
    # Nothing new: restored and ready at once, with nothing to fold.
    again = Counting(trial_ids())
    assert await caught_up_state(event_log, again, Snapshots(event_log, "test")) == (1, 2, 3, 4, 5)
    assert again.folded == 0


async def test_a_snapshot_of_other_code_or_a_damaged_one_is_ignored(event_log: EventLog) -> None:
    await created(event_log, 1, 2)
    await caught_up_state(
        event_log, Counting(trial_ids()), Snapshots(event_log, "test", version="older code")
    )
    replayed = Counting(trial_ids())
    assert await caught_up_state(event_log, replayed, Snapshots(event_log, "test")) == (1, 2)
    assert replayed.folded == 2
    snapshots = Snapshots(event_log, "test")
    await event_log.put_value(
        SNAPSHOTS_BUCKET,
        snapshots.key("Counting"),
        b'{"version": "%s", "sequence": 2}\nnot a pickle' % snapshots.version.encode(),
    )
    assert await snapshots.load("Counting") is None
    damaged = Counting(trial_ids())
    assert await caught_up_state(event_log, damaged, snapshots) == (1, 2)
    assert damaged.folded == 2


async def test_restored_cores_end_where_a_full_replay_ends(event_log: EventLog) -> None:
    """The searcher's two cores and the scheduler on a busy cluster's log, cut
    where none of them has anything left to decide: restored from a snapshot
    of the first part, they fold the rest into the state a replay from
    sequence 1 gives."""
    log = golden_log("generated_cluster.jsonl.gz")
    cores = (SearcherCore, TrialLifecycleCore, SchedulerCore)
    cut = _quiet_point(log, cores, before=2000)
    await append_log(event_log, log[:cut])
    for core in cores:  # one service per core: the snapshot's key names the service and the core's type
        await caught_up_state(event_log, Counting(core()), Snapshots(event_log, core.__name__))
    await append_log(event_log, log[cut:])
    for core in cores:
        restored = Counting(core())
        state = await caught_up_state(event_log, restored, Snapshots(event_log, core.__name__))
        tail = [e for e in log[cut:] if e.aggregate.partition("/")[0] in restored.kinds]
        assert restored.folded == len(tail), core.__name__
        assert state == _folded(core(), await _stored(event_log)), core.__name__


def _folded(core: Any, log: list[Envelope]) -> Any:
    state = core.initial_state()
    for envelope in log:
        if envelope.aggregate.partition("/")[0] in core.kinds:
            state = core.evolve(state, envelope)
    return state


def _quiet_point(log: list[Envelope], cores: tuple[type, ...], before: int) -> int:
    """The last cut at or before `before` after which no core has anything to decide."""
    quiet = 0
    folded = [(core(), core().initial_state()) for core in cores]
    for index, envelope in enumerate(log[:before], start=1):
        folded = [
            (
                core,
                core.evolve(state, envelope) if envelope.aggregate.partition("/")[0] in core.kinds else state,
            )
            for core, state in folded
        ]
        if not any(core.decide(state) for core, state in folded):
            quiet = index
    assert quiet > before // 2
    return quiet


async def _stored(store: EventLog) -> list[Envelope]:
    reading = cast(AsyncGenerator[StoredEvent, None], store.read(None, follow=False))
    return [stored.envelope async for stored in reading]
