"""The event log in this process's memory: `MemoryEventLog`, the twin of the
NATS EventStore (eventstore.py) that passes the same contract suite
(tests/integration/test_event_log_contract.py), so that a whole service's
shell can be tested in milliseconds with no server.

It keeps what JetStream keeps, the way JetStream keeps it: each event as the
bytes of its envelope under its subject, in one sequence from 1; the newest
sequence of each subject (an aggregate's version, which an append that must
not race names); message ids for DUPLICATE_WINDOW_S. Every read checks what
it gives as a NATS read does (wellformed.py), so `publish_raw` can store what
a holder of a part's password could publish and a test can watch it skipped.
"""

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from determined.common.limits import MAX_EVENT_BYTES
from services.common.envelope import Append, Envelope, subject_for, wrap
from services.common.eventlog import (
    DUPLICATE_WINDOW_S,
    ConflictError,
    EventStoreError,
    RefusedEventError,
    StoredEvent,
    first_occurred_at,
    refusal,
    stored_event,
)
from services.common.skips import Skips

# The largest value put_value keeps: a local cluster's nats-server max_payload.
MAX_VALUE_BYTES = MAX_EVENT_BYTES


class MemoryEventLog:
    """One namespace's events and values, in memory (an EventLog)."""

    def __init__(
        self,
        namespace: str = "det",
        appends: frozenset[str] | None = None,
        max_value_bytes: int = MAX_VALUE_BYTES,
    ) -> None:
        self.namespace = namespace
        # The event types this log appends (None: any), as EventStore's.
        self.appends = appends
        self.skips = Skips()
        self._max_value_bytes = max_value_bytes
        # The stored messages, (subject, data): sequence N is the Nth.
        self._messages: list[tuple[str, bytes]] = []
        # Subject -> the sequence of its newest message.
        self._newest: dict[str, int] = {}
        # Message id -> (sequence, time.monotonic() when stored).
        self._msg_ids: dict[str, tuple[int, float]] = {}
        self._values: dict[tuple[str, str], bytes] = {}
        # Set (and replaced) whenever a message is stored: what followers wait on.
        self._grown = asyncio.Event()

    async def append(self, append: Append, *, actor: str) -> tuple[int, Envelope]:
        envelope = wrap(append, actor=actor, occurred_at_ns=time.time_ns())
        if (reason := refusal(envelope, self.appends)) is not None:
            raise RefusedEventError(reason)
        await asyncio.sleep(0)  # as on NATS, other tasks may run while an append is made
        subject = subject_for(self.namespace, append.aggregate)
        # As nats-server: the expected version is checked before duplicates, and a
        # retry of an append that landed is known by being the aggregate's newest.
        if append.expected_version is not None and self._newest.get(subject, 0) != append.expected_version:
            stored = await self.last_event(append.aggregate)
            if stored is not None and stored.envelope.event_id == append.msg_id:
                return stored.sequence, stored.envelope
            raise ConflictError(f"{append.aggregate}: wrong last sequence")
        remembered = self._msg_ids.get(append.msg_id)
        if remembered is not None and time.monotonic() - remembered[1] < DUPLICATE_WINDOW_S:
            return remembered[0], envelope
        sequence = self.publish_raw(subject, envelope.SerializeToString())
        self._msg_ids[append.msg_id] = (sequence, time.monotonic())
        return sequence, envelope

    def publish_raw(self, subject: str, data: bytes) -> int:
        """Stores `data` on `subject` unchecked, as nats-server stores what a
        part publishes on a subject it may publish to; returns its sequence."""
        self._messages.append((subject, data))
        sequence = len(self._messages)
        self._newest[subject] = sequence
        self._grown.set()
        self._grown = asyncio.Event()
        return sequence

    async def last_event(self, aggregate_name: str) -> StoredEvent | None:
        sequence = self._newest.get(subject_for(self.namespace, aggregate_name))
        return None if sequence is None else self._stored(sequence, caught_up=False)

    async def last_sequence(self) -> int:
        return len(self._messages)

    async def last_sequence_of(self, kinds: list[str]) -> int:
        prefixes = self._prefixes(kinds)
        return max((s for subject, s in self._newest.items() if subject.startswith(prefixes)), default=0)

    async def aggregate_versions(self, kind: str) -> dict[str, int]:
        prefix = f"{self.namespace}.events.{kind}."
        versions: dict[str, int] = {}
        for subject, _ in self._messages:
            if subject.startswith(prefix):
                versions[subject[len(prefix) :]] = versions.get(subject[len(prefix) :], 0) + 1
        return versions

    async def events_at(self, sequences: list[int]) -> list[StoredEvent]:
        return [
            self._stored(sequence, caught_up=False)
            for sequence in sequences
            if 1 <= sequence <= len(self._messages)
        ]

    async def first_sequence_at(self, time_ns: int) -> int:
        return await first_occurred_at(self._occurred_at, len(self._messages), time_ns)

    async def _occurred_at(self, sequence: int) -> int:
        return self._stored(sequence, caught_up=False).envelope.occurred_at_ns

    async def read(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[StoredEvent]:
        async for batch in self.read_batches(kinds, start_sequence, follow, aggregates):
            for stored in batch:
                yield stored

    async def read_batches(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[list[StoredEvent]]:
        """What is stored from `start_sequence`, in one list, caught_up on its
        last; then, following, what each append stores."""
        wanted = self._wanted(kinds, aggregates)
        read_up_to = max(start_sequence, 1) - 1
        while True:
            grown, end = self._grown, len(self._messages)
            found = [
                sequence
                for sequence in range(read_up_to + 1, end + 1)
                if wanted(self._messages[sequence - 1][0])
            ]
            read_up_to = end
            if found:
                yield [self._stored(sequence, caught_up=sequence == found[-1]) for sequence in found]
            if not follow:
                return
            if read_up_to == len(self._messages):
                await grown.wait()

    async def get_value(self, bucket: str, key: str) -> bytes | None:
        return self._values.get((bucket, key))

    async def put_value(self, bucket: str, key: str, value: bytes) -> None:
        if len(value) > self._max_value_bytes:
            raise EventStoreError(f"a value of {len(value)} bytes is over {self._max_value_bytes}")
        self._values[(bucket, key)] = value

    @property
    def max_value_bytes(self) -> int:
        return self._max_value_bytes

    async def close(self) -> None:
        """Nothing to close: the events stay in memory while the object lives."""

    def _wanted(self, kinds: list[str] | None, aggregates: list[str] | None) -> Callable[[str], bool]:
        """Whether a subject is read: one of the aggregates' when named, else of the kinds."""
        if aggregates is not None:
            return {subject_for(self.namespace, name) for name in aggregates}.__contains__
        prefixes = self._prefixes(kinds)
        return lambda subject: subject.startswith(prefixes)

    def _prefixes(self, kinds: list[str] | None) -> tuple[str, ...]:
        if kinds is None:
            return (f"{self.namespace}.events.",)
        return tuple(f"{self.namespace}.events.{kind}." for kind in kinds)

    def _stored(self, sequence: int, *, caught_up: bool) -> StoredEvent:
        subject, data = self._messages[sequence - 1]
        return stored_event(self.skips, self.namespace, sequence, data, caught_up, subject)
