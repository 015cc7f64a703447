"""The event log as the services' shells use it: the `EventLog` protocol, what
it gives (StoredEvent) and its errors.

Two implementations pass one contract suite (tests/integration/
test_event_log_contract.py): `EventStore` (eventstore.py), on JetStream, what
every part of a cluster uses; and `MemoryEventLog` (memory_log.py), in this
process's memory, on which the unit tests of a whole service's shell run in
milliseconds.

Errors, all under EventStoreError:

    EventStoreError
    ├── ConflictError      an expected aggregate version did not match
    ├── NotFoundError      a context hash that is not stored
    └── RefusedEventError  an append of an event that is not well-formed,
                           or of a type this part does not append

What is stored may be anything a holder of a part's password published:
every read checks each event (wellformed.py) and gives one that is not
well-formed as StoredEvent.skipped, an empty envelope, recorded in `skips`
(logged once, counted); `append` refuses to store one.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from determined.common.limits import MAX_EVENT_BYTES
from services.common.envelope import Append, Envelope
from services.common.skips import Skips
from services.common.wellformed import MalformedEventError, decoded, problem

# A message id is remembered this long: an append repeated within it is stored once.
DUPLICATE_WINDOW_S = 600.0
# The key-value bucket of the services' snapshots (snapshots.py).
SNAPSHOTS_BUCKET = "snapshots"


class EventStoreError(Exception):
    pass


class ConflictError(EventStoreError):
    """The aggregate moved on since the decision was made: refold and retry."""


class NotFoundError(EventStoreError):
    pass


class RefusedEventError(EventStoreError):
    """An append of an event that is not well-formed, or of a type this part does not append."""


@dataclass(frozen=True)
class StoredEvent:
    sequence: int
    envelope: Envelope
    # True when this was the newest stored event of the read when delivered.
    caught_up: bool
    # Why the stored event could not be read (wellformed.py), "" when it could:
    # a reader is given such an event as an empty envelope, which every core and
    # the projection fold as nothing, so that its position moves past it.
    skipped: str = ""


class EventLog(Protocol):
    """What a shell needs of the event log: one namespace's events, in one
    order (the sequence), each under its aggregate ("<kind>/<id>"), and a few
    small values kept beside them (snapshots)."""

    namespace: str
    # The stored events this process could not read (skips.py).
    skips: Skips

    async def append(self, append: Append, *, actor: str) -> tuple[int, Envelope]:
        """Appends one decided event; returns its sequence and envelope.

        A repeat of an append (same message id, within DUPLICATE_WINDOW_S)
        stores nothing and returns the original sequence. With an
        expected_version, ConflictError unless the aggregate's newest event
        has that sequence (0: it has none). RefusedEventError, and nothing
        stored, for an event that is not well-formed or whose type this log
        may not append."""
        ...

    async def last_event(self, aggregate_name: str) -> StoredEvent | None:
        """The aggregate's newest event; its sequence is the version an append
        that must not race passes as expected_version."""
        ...

    async def last_sequence(self) -> int:
        """The sequence of the newest event (0 when there is none)."""
        ...

    async def last_sequence_of(self, kinds: list[str]) -> int:
        """The sequence of the newest event of these aggregate kinds (0 if none)."""
        ...

    async def aggregate_versions(self, kind: str) -> dict[str, int]:
        """Aggregate id -> number of events, for every aggregate of one kind."""
        ...

    def read(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[StoredEvent]:
        """Events in order from `start_sequence`, of the given aggregate kinds
        (all when None); caught_up is True on an event that was the newest of
        the read when delivered. With follow=False it stops at the current end;
        else it waits for what comes next, for ever.

        With `aggregates` ("trial/7", "allocation/7.1"), exactly those
        aggregates' events, read through their subjects (not a scan of the
        log), and `kinds` is ignored."""
        ...

    def read_batches(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[list[StoredEvent]]:
        """As `read`, in lists of what has arrived, for readers that apply a replay in bulk."""
        ...

    async def events_at(self, sequences: list[int]) -> list[StoredEvent]:
        """The events stored at these sequences, in their order (a sequence
        that holds none is left out), each read on its own: what an index of
        the log (the gateway's by event type) points at."""
        ...

    async def first_sequence_at(self, time_ns: int) -> int:
        """The sequence of the first event that occurred at or after `time_ns`
        (Unix nanoseconds), or last_sequence() + 1 when there is none, found
        without reading the log (`first_occurred_at`): where `--since TIME` starts."""
        ...

    async def get_value(self, bucket: str, key: str) -> bytes | None:
        """The value last put under `key` in `bucket` (None: never put)."""
        ...

    async def put_value(self, bucket: str, key: str, value: bytes) -> None:
        """Keeps `value` under `key` (at most max_value_bytes), replacing the one before."""
        ...

    @property
    def max_value_bytes(self) -> int:
        """The largest value `put_value` stores."""
        ...

    async def close(self) -> None: ...


def refusal(envelope: Envelope, appends: frozenset[str] | None) -> str | None:
    """Why an event must not be appended by a part that appends the types
    `appends` (None: any), or None when it may."""
    event_type = envelope.WhichOneof("payload") or ""
    if appends is not None and event_type not in appends:
        return f"{event_type or 'an event without a payload'} is not an event this part appends"
    if (found := problem(envelope)) is not None:
        return f"not appended: {found}"
    if envelope.ByteSize() > MAX_EVENT_BYTES:
        return f"not appended: {event_type} is {envelope.ByteSize()} bytes, over {MAX_EVENT_BYTES}"
    return None


async def first_occurred_at(occurred_at: Callable[[int], Awaitable[int]], last: int, time_ns: int) -> int:
    """The first sequence up to `last` whose event occurred at or after
    `time_ns` (last + 1: none), by a binary search on `occurred_at(sequence)`
    (0 for an event that cannot be read): about 20 reads in a million events.

    The log's order is the order of its occurred_at_ns only up to its writers'
    clocks (an agent's may be behind; an append retried through an outage keeps
    its first time), so a caller that must see every event from T asks for T
    less a margin and filters on occurred_at_ns. Not stored times: a log loaded
    into another nats-server (a replay) was stored long after it occurred."""
    low, high = 1, last + 1
    while low < high:
        middle = (low + high) // 2
        if await occurred_at(middle) < time_ns:
            low = middle + 1
        else:
            high = middle
    return low


def stored_event(
    skips: Skips, namespace: str, sequence: int, data: bytes, caught_up: bool, subject: str
) -> StoredEvent:
    """A stored message as read: an event that is not well-formed is recorded
    as skipped (logged once, counted) and given as an empty envelope (see
    StoredEvent.skipped). `subject` "" when not known: not compared."""
    try:
        return StoredEvent(sequence, decoded(data, subject or None, namespace), caught_up)
    except MalformedEventError as error:
        skips.record(sequence, subject, str(error))
        return StoredEvent(sequence, Envelope(), caught_up, skipped=str(error))


def namespaced(name: str, namespace: str) -> str:
    """A stream's or bucket's name in a namespace: `name` itself in "det" (a
    cluster's), else `<name>_<namespace>`."""
    return name if namespace == "det" else f"{name}_{namespace}"
