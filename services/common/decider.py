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

A stored event the core cannot fold or answer (evolve or decide raises: an
event that is well-formed but impossible, say about an allocation nobody
requested) is skipped: the state stays what it was before it, the event is
recorded in the store's skips (logged once, counted: skips.py), and the shell
goes on with what follows. Events no reader can read never reach the core
(the store gives them as empty envelopes, which fold as nothing).

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

from services.common.envelope import Append, Envelope, kinds_of, subject_for
from services.common.eventlog import ConflictError, EventLog, RefusedEventError, StoredEvent
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
    # The NATS EventStore in a service; a MemoryEventLog in a unit test.
    store: EventLog
    core: Core[State]
    actor: str
    # Called after every fold once caught up: a service with side effects
    # (the agent) acts on the state here and returns events to append.
    on_state: Callable[[State], Awaitable[list[Append]]] | None = None
    # Called once, the first time the shell has caught up with the log (at
    # once when the log holds nothing of its kinds): the service is ready.
    on_caught_up: Callable[[], Awaitable[None]] | None = None
    # Called with the state and the stream sequence it covers (every event of
    # its kinds up to it folded or skipped) when the shell first catches up,
    # before on_caught_up, and after each event it reads from then on. The
    # scheduler publishes its job queue here.
    on_position: Callable[[State, int], Awaitable[None]] | None = None
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
                state = await self._settled_quietly(state, own_sequences)
            await self._positioned(state, position)
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
                        state = await self._settled_quietly(self._ticked(state), own_sequences)
                        continue
                    stored, reading = reading.result(), None
                else:
                    stored = await anext(read)
                if stored.sequence in own_sequences:
                    own_sequences.discard(stored.sequence)
                    await self._positioned(state, stored.sequence)
                    continue
                before = state
                state = self._folded_or_skipped(state, stored)
                if started or stored.caught_up:
                    # Once started, every decision answers the event just folded;
                    # the first settle after the replay answers no one event.
                    cause = stored.envelope if started and not stored.skipped else None
                    with structlog.contextvars.bound_contextvars(
                        event_id=stored.envelope.event_id,
                        aggregate=stored.envelope.aggregate,
                        correlation_id=stored.envelope.correlation_id,
                    ):
                        state = await self._settled_or_skipped(before, state, stored, own_sequences, cause)
                    await self._positioned(state, stored.sequence)
                    started = True
                    await self._caught_up()
                await self._snapshot(state, stored.sequence, started=started, exact=not own_sequences)
        finally:
            if reading is not None:
                reading.cancel()
                await asyncio.wait((reading,))

    def _folded_or_skipped(self, state: State, stored: StoredEvent) -> State:
        """The state with `stored` folded; the state as it was when the core
        cannot fold it (the event is recorded as skipped)."""
        try:
            return self.core.evolve(state, stored.envelope)
        except Exception as error:  # noqa: BLE001 - one event must never stop the service
            self._skip(stored, f"{type(self.core).__name__} cannot fold it: {_described(error)}")
            return state

    async def _settled_or_skipped(
        self,
        before: State,
        state: State,
        stored: StoredEvent,
        own_sequences: set[int],
        cause: Envelope | None,
    ) -> State:
        """`_settle(state)`; when the core cannot decide on it, the state
        before `stored` (recorded as skipped): what this settle appended is
        folded again when it comes back through the log, after the event."""
        appended: set[int] = set()
        try:
            return await self._settle(state, own_sequences, cause, appended)
        except _DecideError as error:
            self._skip(stored, f"{type(self.core).__name__} cannot decide on it: {error}")
            own_sequences.difference_update(appended)
            return before

    def _ticked(self, state: State) -> State:
        try:
            return self.core.tick(state, time.time_ns())
        except Exception as error:  # noqa: BLE001 - a tick must never stop the service
            log.error("tick_failed", core=type(self.core).__name__, error=_described(error))
            return state

    async def _settled_quietly(self, state: State, own_sequences: set[int]) -> State:
        """`_settle(state)` answering no one event (a clock tick, a restored
        snapshot); the state as it was when the core cannot decide on it
        (logged: no event is to blame)."""
        appended: set[int] = set()
        try:
            return await self._settle(state, own_sequences, None, appended)
        except _DecideError as error:
            log.error("decide_failed", core=type(self.core).__name__, error=str(error))
            own_sequences.difference_update(appended)
            return state

    def _skip(self, stored: StoredEvent, reason: str) -> None:
        subject = subject_for(self.store.namespace, stored.envelope.aggregate)
        self.store.skips.record(stored.sequence, subject, reason, reader=type(self.core).__name__)

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

    async def _positioned(self, state: State, sequence: int) -> None:
        if self.on_position is not None:
            await self.on_position(state, sequence)

    async def _caught_up(self) -> None:
        callback, self.on_caught_up = self.on_caught_up, None
        if callback is not None:
            await callback()

    async def _settle(
        self, state: State, own_sequences: set[int], cause: Envelope | None, appended: set[int] | None = None
    ) -> State:
        """Decides and appends until the core has nothing more to say. Each
        append records its cause and carries that cause's correlation id: the
        event just folded, which every decision it led to answers; on the
        first settle after a replay, which answers no one event, our own
        previous append. The sequences appended are added to `appended`;
        _DecideError when the core's decide or evolve, or `on_state`, raises."""
        previous: Envelope | None = None
        for _ in range(1000):
            try:
                appends = list(self.core.decide(state))
            except Exception as error:
                raise _DecideError(_described(error)) from error
            if self.on_state is not None:
                try:
                    appends += await self.on_state(state)
                except Exception as error:
                    raise _DecideError(f"acting on it failed: {_described(error)}") from error
            if not appends:
                return state
            for append in appends:
                try:
                    state, previous = await self._append(
                        state, _caused_by(append, cause or previous), own_sequences, appended
                    )
                except ConflictError as error:
                    # Another writer got there first; its event reaches us
                    # through the log and the next decision sees it.
                    log.warning("append_conflict", aggregate=append.aggregate, error=str(error))
                    return state
        raise _DecideError(f"{self.actor}: its decisions did not settle")

    async def _append(
        self, state: State, append: Append, own_sequences: set[int], appended: set[int] | None
    ) -> tuple[State, Envelope]:
        try:
            sequence, envelope = await self.store.append(append, actor=self.actor)
        except RefusedEventError as error:  # a core's bug, not the log's: its decision is dropped
            raise _DecideError(str(error)) from error
        own_sequences.add(sequence)
        if appended is not None:
            appended.add(sequence)
        log.debug("appended", event_id=envelope.event_id, aggregate=envelope.aggregate, sequence=sequence)
        try:
            return self.core.evolve(state, envelope), envelope
        except Exception as error:
            raise _DecideError(f"it cannot fold its own decision: {_described(error)}") from error


class _DecideError(Exception):
    """The core could not decide on a state (its decide or `on_state`
    raised, or it could not fold what it decided)."""


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _caused_by(append: Append, cause: Envelope | None) -> Append:
    if cause is None or append.causation_id:
        return append
    return replace(
        append,
        causation_id=cause.event_id,
        correlation_id=append.correlation_id or cause.correlation_id or cause.event_id,
    )
