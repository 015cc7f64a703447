"""The thin shell around a service's pure core.

A core is three plain functions over plain data (see `Core`): `evolve` folds
one stored event into the state, `decide` looks at the state and returns the
events that should now be appended. The shell replays the kinds of aggregate
the core reads from sequence 1 (that is how a restarted service rebuilds its
state), then follows the log. It decides only when it has caught up with the
log, so a replay never re-decides the past, and it folds its own appends at
once (skipping them when they come back) so that two decisions in a row see
each other. Message ids derived from the cause make a repeated decision after
a crash harmless.

A core whose decisions depend on time passing with nothing in the log (the
scheduler's minimum run time before a preemption) has a `tick`: a shell with
`tick_s` folds the clock into the state when the log was quiet that long.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar

import structlog

from services.common.envelope import Append, Envelope, kinds_of
from services.common.eventstore import ConflictError, EventStore, StoredEvent
from services.common.snapshots import SNAPSHOT_EVERY, Snapshots
from services.common.upcast import upcast

State = TypeVar("State")

log = structlog.get_logger()


class Core(Protocol[State]):
    """What a service's pure core provides."""

    kinds: list[str]

    def initial_state(self) -> State: ...

    def evolve(self, state: State, envelope: Envelope) -> State: ...

    def decide(self, state: State) -> list[Append]: ...

    def tick(self, state: State, now_ns: int) -> State: ...


class PureCore(Generic[State]):
    """A core made of a module's pure functions. `folds` names the event types
    `evolve_one` folds (the kinds of aggregate it reads follow from them), and
    every event is read in today's shape (`upcast`) before it is folded.
    `tick(state, now_ns)` folds the clock (a core without one ignores it)."""

    def __init__(
        self,
        folds: tuple[str, ...],
        initial_state: Callable[[], State],
        evolve_one: Callable[[State, Envelope], State],
        decide: Callable[[State], list[Append]],
        tick: Callable[[State, int], State] | None = None,
    ) -> None:
        self.folds = folds
        self.kinds = kinds_of(folds)
        self._initial_state = initial_state
        self._evolve_one = evolve_one
        self._decide = decide
        self._tick = tick

    def initial_state(self) -> State:
        return self._initial_state()

    def evolve(self, state: State, envelope: Envelope) -> State:
        for event in upcast(envelope):
            state = self._evolve_one(state, event)
        return state

    def decide(self, state: State) -> list[Append]:
        return self._decide(state)

    def tick(self, state: State, now_ns: int) -> State:
        return state if self._tick is None else self._tick(state, now_ns)


@dataclass
class Shell(Generic[State]):
    store: EventStore
    core: Core[State]
    actor: str
    # Called after every fold once caught up: a service with side effects
    # (the agent) acts on the state here and returns events to append.
    on_state: Callable[[State], Awaitable[list[Append]]] | None = None
    # Called once, the first time the shell has caught up with the log (at
    # once when the log holds nothing of its kinds): the service is ready.
    on_caught_up: Callable[[], Awaitable[None]] | None = None
    # Where the state is kept between runs (snapshots.py): a start replays
    # only what came after the newest snapshot. None: from sequence 1.
    snapshots: Snapshots | None = None
    # Once caught up, when no event came for this long: folds
    # `core.tick(state, time.time_ns())` and decides again. None: never.
    tick_s: float | None = None
    _folded: int = field(default=0, init=False)
    _saved_since_started: bool = field(default=False, init=False)

    async def run(self) -> None:
        state, position = await self._restored()
        own_sequences: set[int] = set()
        started = not await self._has_events(after=position)
        if started:
            if position:  # restored, and nothing came after: what it holds may want deciding
                state = await self._settle(state, own_sequences, None)
            await self._caught_up()
        read = self.store.read(self.core.kinds, start_sequence=position + 1, follow=True)
        # The read a tick interrupted: waited on again, never cancelled (that
        # would end the read) until the shell stops.
        reading: asyncio.Future[StoredEvent] | None = None
        try:
            while True:
                if started and self.tick_s is not None:
                    reading = reading or asyncio.ensure_future(anext(read))
                    done, _ = await asyncio.wait((reading,), timeout=self.tick_s)
                    if not done:
                        state = await self._settle(self.core.tick(state, time.time_ns()), own_sequences, None)
                        continue
                    stored, reading = reading.result(), None
                else:
                    stored = await anext(read)
                if stored.sequence in own_sequences:
                    own_sequences.discard(stored.sequence)
                    continue
                state = self.core.evolve(state, stored.envelope)
                if started or stored.caught_up:
                    # Once started, every decision answers the event just folded;
                    # the first settle after the replay answers no one event.
                    cause = stored.envelope if started else None
                    with structlog.contextvars.bound_contextvars(
                        event_id=stored.envelope.event_id,
                        aggregate=stored.envelope.aggregate,
                        correlation_id=stored.envelope.correlation_id,
                    ):
                        state = await self._settle(state, own_sequences, cause)
                    started = True
                    await self._caught_up()
                await self._snapshot(state, stored.sequence, started=started, exact=not own_sequences)
        finally:
            if reading is not None:
                reading.cancel()
                await asyncio.wait((reading,))

    async def _has_events(self, after: int = 0) -> bool:
        return await self.store.last_sequence_of(self.core.kinds) > after

    async def _restored(self) -> tuple[State, int]:
        """The newest snapshot's state and sequence, else the initial state and 0."""
        snapshot = None if self.snapshots is None else await self.snapshots.load(type(self.core).__name__)
        if snapshot is None:
            return self.core.initial_state(), 0
        log.info("snapshot_restored", core=type(self.core).__name__, sequence=snapshot.sequence)
        return snapshot.state, snapshot.sequence

    async def _snapshot(self, state: State, sequence: int, *, started: bool, exact: bool) -> None:
        """Saves the state every SNAPSHOT_EVERY folded events and once when
        caught up, at a moment when it is `exact`ly the fold of the log up to
        `sequence` (each own append read back)."""
        self._folded += 1
        due = self._folded >= SNAPSHOT_EVERY or (started and not self._saved_since_started)
        if self.snapshots is not None and due and exact:
            await self.snapshots.save(type(self.core).__name__, state, sequence)
            self._folded, self._saved_since_started = 0, started

    async def _caught_up(self) -> None:
        callback, self.on_caught_up = self.on_caught_up, None
        if callback is not None:
            await callback()

    async def _settle(self, state: State, own_sequences: set[int], cause: Envelope | None) -> State:
        """Decides and appends until the core has nothing more to say. Each
        append records its cause and carries that cause's correlation id: the
        event just folded, which every decision it led to answers; on the
        first settle after a replay, which answers no one event, our own
        previous append."""
        previous: Envelope | None = None
        for _ in range(1000):
            appends = list(self.core.decide(state))
            if self.on_state is not None:
                appends += await self.on_state(state)
            if not appends:
                return state
            for append in appends:
                try:
                    state, previous = await self._append(
                        state, _caused_by(append, cause or previous), own_sequences
                    )
                except ConflictError as error:
                    # Another writer got there first; its event reaches us
                    # through the log and the next decision sees it.
                    log.warning("append_conflict", aggregate=append.aggregate, error=str(error))
                    return state
        raise RuntimeError(f"{self.actor}: decisions did not settle")

    async def _append(self, state: State, append: Append, own_sequences: set[int]) -> tuple[State, Envelope]:
        sequence, envelope = await self.store.append(append, actor=self.actor)
        own_sequences.add(sequence)
        log.debug("appended", event_id=envelope.event_id, aggregate=envelope.aggregate, sequence=sequence)
        return self.core.evolve(state, envelope), envelope


def _caused_by(append: Append, cause: Envelope | None) -> Append:
    if cause is None or append.causation_id:
        return append
    return replace(
        append,
        causation_id=cause.event_id,
        correlation_id=append.correlation_id or cause.correlation_id or cause.event_id,
    )
