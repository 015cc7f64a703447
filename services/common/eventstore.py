"""The event log on JetStream: `EventStore`, the EventLog (eventlog.py) that
every part of a cluster uses, with the trial logs (trial_logs.py) and the
context folders (contexts.py) on the same connection.

Errors are eventlog.py's, and NatsUnavailableError (connection.py) from any
call made with a limited wait. Every call waits out an outage of nats-server
(`Connection.call`): services for as long as it lasts, the gateway's RPCs a
few seconds. A read that follows the log survives outages of any length and
goes on from where it was (stream_reading.py).

Limits of the streams (the gateway applies them, also to streams that older
versions created; see StreamLimits):

- EVENTS keeps every event for ever: no limit of age, size or count. One event
  is at most nats-server's max_payload (8 MiB on a local cluster). A message
  id is remembered for DUPLICATE_WINDOW_S (600 s).
- LOGS: see trial_logs.py.

Small values beside the events (snapshots.py) are JetStream key-value
buckets, one per name and namespace, keeping the last value of each key.
"""

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, replace
from typing import cast

import nats.js.errors
import structlog
from nats.js import api as js_api
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from services.common.connection import Connection
from services.common.contexts import Contexts
from services.common.envelope import Append, Envelope, subject_for, wrap
from services.common.eventlog import (
    DUPLICATE_WINDOW_S,
    ConflictError,
    RefusedEventError,
    StoredEvent,
    first_occurred_at,
    namespaced,
    refusal,
    stored_event,
)
from services.common.skips import Skips
from services.common.stream_reading import Raw, StreamReader
from services.common.trial_logs import LOGS_DUPLICATE_WINDOW_S, TrialLogs

__all__ = ["LOGS_MAX_AGE_S", "LOGS_MAX_BYTES", "EventStore", "Raw", "StreamLimits"]

WRONG_LAST_SEQUENCE = 10071
STREAM_NAME_IN_USE = 10058
LOGS_MAX_AGE_S = 30 * 24 * 3600.0
LOGS_MAX_BYTES = 2 * 1024**3
# The stream settings the gateway brings up to date on existing streams: StreamLimits, and
# allow_direct (a part whose reading nats-server narrows gets single events only by
# `$JS.API.DIRECT.GET.<stream>.<subject>`, which names the subject; deploy/local/credentials.py).
LIMIT_FIELDS = ("max_age", "max_bytes", "max_msg_size", "discard", "duplicate_window", "allow_direct")


log = structlog.get_logger()


@dataclass(frozen=True)
class StreamLimits:
    """What the LOGS stream may hold (EVENTS holds everything)."""

    logs_max_bytes: int = LOGS_MAX_BYTES
    logs_max_age_s: float = LOGS_MAX_AGE_S


class EventStore:
    """Appends and reads events for one namespace ("det" on a cluster)."""

    def __init__(
        self, connection: Connection, namespace: str = "det", appends: frozenset[str] | None = None
    ) -> None:
        self.connection = connection
        # The event types this part may append (None: any); see `append`.
        self.appends = appends
        # The stored events this process could not read (skips.py).
        self.skips = Skips()
        self.nc = connection.nc
        self.namespace = namespace
        self.events_stream = namespaced("EVENTS", namespace)
        self.reader = StreamReader(connection)
        self.logs = TrialLogs(self)
        self.contexts = Contexts(connection, namespace)
        self._buckets: dict[str, KeyValue] = {}

    @property
    def js(self) -> JetStreamContext:
        return self.connection.jetstream()

    @classmethod
    async def connect(
        cls,
        url: str,
        namespace: str = "det",
        name: str = "",
        *,
        limits: StreamLimits | None = None,
        appends: frozenset[str] | None = None,
    ) -> "EventStore":
        """Connects (waiting for nats-server as long as it takes) and creates
        the streams that are missing; with `limits`, also brings existing
        streams to them (the gateway does: one part decides the limits).
        With `appends`, it appends only events of those types."""
        store = cls(await Connection.open(url, name), namespace, appends)
        await store.connection.call(lambda: store.ensure_streams(limits))
        return store

    async def close(self) -> None:
        await self.connection.close()

    async def ensure_streams(self, limits: StreamLimits | None = None) -> None:
        """Creates missing streams with `limits` (else the defaults); with
        `limits`, also updates existing streams whose limits (or direct gets,
        LIMIT_FIELDS) differ."""
        wanted = limits or StreamLimits()
        await self._ensure_stream(
            js_api.StreamConfig(
                name=self.events_stream,
                subjects=[f"{self.namespace}.events.>"],
                duplicate_window=DUPLICATE_WINDOW_S,
                max_msg_size=self.nc.max_payload,
                storage=js_api.StorageType.FILE,
                allow_direct=True,
            ),
            update=limits is not None,
        )
        await self._ensure_stream(
            js_api.StreamConfig(
                name=self.logs.stream,
                subjects=[f"{self.namespace}.logs.>"],
                max_age=wanted.logs_max_age_s,
                max_bytes=wanted.logs_max_bytes,
                discard=js_api.DiscardPolicy.OLD,
                duplicate_window=LOGS_DUPLICATE_WINDOW_S,
                max_msg_size=self.nc.max_payload,
                storage=js_api.StorageType.FILE,
                allow_direct=True,
            ),
            update=limits is not None,
        )
        await self.contexts.ensure_bucket()

    async def _ensure_stream(self, config: js_api.StreamConfig, *, update: bool) -> None:
        try:
            await self.js.add_stream(config)
            return
        except nats.js.errors.BadRequestError as error:
            if error.err_code != STREAM_NAME_IN_USE:
                raise
        if not update:
            return
        current = (await self.js.stream_info(config.name or "")).config
        changed = {field: getattr(config, field) for field in LIMIT_FIELDS}
        if any(getattr(current, field) != value for field, value in changed.items()):
            await self.js.update_stream(replace(current, **changed))
            log.info("stream_limits_applied", stream=config.name, **{k: str(v) for k, v in changed.items()})

    # -- events ---------------------------------------------------------------

    # -- events ---------------------------------------------------------------

    def subject(self, aggregate_name: str) -> str:
        return subject_for(self.namespace, aggregate_name)

    async def append(self, append: Append, *, actor: str) -> tuple[int, Envelope]:
        """Appends one decided event; returns its stream sequence and envelope.

        A duplicate (same message id within the window) returns the original
        sequence and stores nothing. An attempt cut short by an outage is
        made again until it lands, stored once: within the duplicate window
        (600 s) nats-server drops the repeat itself; past it, the aggregate's
        newest event is looked at first. Nothing can be appended while the
        server is down, so an earlier attempt that landed is that event,
        unless another writer appended to the same aggregate in the moment
        between the server's return and this retry.

        RefusedEventError, and nothing stored, for an event that is not
        well-formed (wellformed.py) or whose type this store may not append.
        """
        envelope = wrap(append, actor=actor, occurred_at_ns=time.time_ns())
        self._check_append(envelope)
        headers = {"Nats-Msg-Id": append.msg_id}
        if append.expected_version is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(append.expected_version)
        attempts = 0

        async def attempt() -> tuple[int, Envelope]:
            nonlocal attempts
            attempts += 1
            if attempts > 1 and (stored := await self._stored_as_newest(append)) is not None:
                return stored.sequence, stored.envelope
            try:
                ack = await self.js.publish(
                    self.subject(append.aggregate),
                    envelope.SerializeToString(),
                    stream=self.events_stream,
                    headers=headers,
                )
            except nats.js.errors.BadRequestError as error:
                if error.err_code != WRONG_LAST_SEQUENCE:
                    raise
                # The server checks the expected sequence before duplicates: a
                # retry of an append that did land looks like a conflict.
                if (stored := await self._stored_as_newest(append)) is not None:
                    return stored.sequence, stored.envelope
                raise ConflictError(f"{append.aggregate}: {error.description}") from error
            return ack.seq, envelope

        return await self.connection.call(attempt)

    def _check_append(self, envelope: Envelope) -> None:
        if (reason := refusal(envelope, self.appends)) is not None:
            raise RefusedEventError(reason)

    def stored_event(self, raw: Raw) -> StoredEvent:
        """A message of the events stream as read (eventlog.stored_event)."""
        sequence, data, caught_up, subject = raw
        return stored_event(self.skips, self.namespace, sequence, data, caught_up, subject)

    async def _stored_as_newest(self, append: Append) -> StoredEvent | None:
        """The aggregate's newest event if it is this append, stored already."""
        stored = await self._last_event(append.aggregate)
        return stored if stored is not None and stored.envelope.event_id == append.msg_id else None

    async def last_event(self, aggregate_name: str) -> StoredEvent | None:
        """The aggregate's newest event; its sequence is the version an append
        that must not race passes as expected_version."""
        return await self.connection.call(lambda: self._last_event(aggregate_name))

    async def _last_event(self, aggregate_name: str) -> StoredEvent | None:
        try:
            msg = await self.js.get_last_msg(self.events_stream, self.subject(aggregate_name), direct=True)
        except nats.js.errors.NotFoundError:
            return None
        return self.stored_event((msg.seq or 0, msg.data or b"", False, msg.subject or ""))

    async def last_sequence(self) -> int:
        info = await self.connection.call(lambda: self.js.stream_info(self.events_stream))
        return info.state.last_seq

    async def last_sequence_of(self, kinds: list[str]) -> int:
        """The sequence of the newest event of these aggregate kinds (0 if none)."""
        return await self.reader.last_sequence_of(self.events_stream, self._subjects(kinds))

    async def aggregate_versions(self, kind: str) -> dict[str, int]:
        """Aggregate id -> number of events, for every aggregate of one kind."""
        prefix = f"{self.namespace}.events.{kind}."
        info = await self.connection.call(
            lambda: self.js.stream_info(self.events_stream, subjects_filter=f"{prefix}>")
        )
        subjects = info.state.subjects or {}
        return {subject[len(prefix) :]: count for subject, count in subjects.items()}

    async def read(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[StoredEvent]:
        """Events in stream order from `start_sequence`, of the given aggregate
        kinds (all when None), or of exactly the given aggregates. With
        follow=False it stops at the current end. Each kind is read through a
        consumer of its own subjects (which nats-server's permissions of a
        part can narrow), merged in order; aggregates through direct gets of
        their subjects (stream_reading.py), which only a reader of everything
        may make."""
        subjects = self._subjects(kinds, aggregates)
        reading = self.reader.read(self.events_stream, subjects, start_sequence, follow)
        async with contextlib.aclosing(reading) as read:
            async for raw in read:
                yield self.stored_event(raw)

    async def read_stored(
        self,
        start_sequence: int,
        kinds: list[str] | None = None,
        follow: bool = False,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[list[Raw]]:
        """As `read_batches` (by default every event from `start_sequence` to
        the current end), each as (sequence, envelope bytes, caught_up,
        subject), undecoded: for a reader that decodes them elsewhere
        (services/gateway/replay.py), or that looks at a few fields of each
        before it checks the few it keeps (`stored_event`: det events)."""
        subjects = self._subjects(kinds, aggregates)
        reading = self.reader.read_batches(self.events_stream, subjects, start_sequence, follow)
        async with contextlib.aclosing(reading) as read:
            async for batch in read:
                yield batch

    async def read_batches(
        self,
        kinds: list[str] | None = None,
        start_sequence: int = 1,
        follow: bool = True,
        aggregates: list[str] | None = None,
    ) -> AsyncIterator[list[StoredEvent]]:
        """As `read`, in lists of the events that have arrived (at most
        stream_reading.READ_BUFFER), for readers that apply a replay in bulk."""
        reading = cast(
            AsyncGenerator[list[Raw], None], self.read_stored(start_sequence, kinds, follow, aggregates)
        )
        async with contextlib.aclosing(reading) as read:
            async for batch in read:
                yield [self.stored_event(raw) for raw in batch]

    async def raw_at(self, sequences: list[int]) -> list[Raw]:
        """As `events_at`, undecoded (as `read_stored`)."""
        return await self.reader.messages_at(self.events_stream, sequences)

    async def events_at(self, sequences: list[int]) -> list[StoredEvent]:
        """The events at these sequences, in their order, by direct gets
        (stream_reading.py: a reader of everything, the gateway, only)."""
        return [self.stored_event(raw) for raw in await self.raw_at(sequences)]

    async def first_sequence_at(self, time_ns: int) -> int:
        """The sequence of the first event that occurred at or after `time_ns`
        (eventlog.first_occurred_at: a binary search of single events, each a direct get)."""
        return await first_occurred_at(self._occurred_at, await self.last_sequence(), time_ns)

    async def _occurred_at(self, sequence: int) -> int:
        """When the event at `sequence` occurred (0: it cannot be read)."""
        try:
            msg = await self.connection.call(
                lambda: self.js.get_msg(self.events_stream, seq=sequence, direct=True)
            )
        except nats.js.errors.NotFoundError:
            return 0
        return self.stored_event(
            (sequence, msg.data or b"", False, msg.subject or "")
        ).envelope.occurred_at_ns

    def _subjects(self, kinds: list[str] | None, aggregates: list[str] | None = None) -> list[str]:
        if aggregates is not None:
            return [self._exact_subject(name) for name in dict.fromkeys(aggregates)]
        if kinds is None:
            return [f"{self.namespace}.events.>"]
        return [f"{self.namespace}.events.{kind}.>" for kind in kinds]

    def _exact_subject(self, aggregate_name: str) -> str:
        """The aggregate's subject; ValueError for a name that would read others' (a wildcard)."""
        subject = self.subject(aggregate_name)
        if any(token in ("", "*", ">") for token in subject.split(".")) or " " in subject:
            raise ValueError(f"not an aggregate: {aggregate_name!r}")
        return subject

    # -- values beside the events ----------------------------------------------

    def bucket_name(self, bucket: str) -> str:
        """The key-value bucket's name in JetStream (KV_<it> is its stream)."""
        return namespaced(bucket, self.namespace)

    @property
    def max_value_bytes(self) -> int:
        return self.nc.max_payload

    async def get_value(self, bucket: str, key: str) -> bytes | None:
        """None also while the bucket does not exist: a reader does not make it
        (its writer may be the only part nats-server lets make it)."""
        try:
            kv = await self._bucket(bucket, make=False)
            entry = await self.connection.call(lambda: kv.get(key))
        except (nats.js.errors.BucketNotFoundError, nats.js.errors.KeyNotFoundError):
            return None
        return entry.value or b""

    async def put_value(self, bucket: str, key: str, value: bytes) -> None:
        """Makes the bucket when it is missing (keeping one value per key)."""
        kv = await self._bucket(bucket, make=True)
        await self.connection.call(lambda: kv.put(key, value))

    async def _bucket(self, bucket: str, *, make: bool) -> KeyValue:
        if bucket not in self._buckets:
            self._buckets[bucket] = await self.connection.call(lambda: self._opened_bucket(bucket, make))
        return self._buckets[bucket]

    async def _opened_bucket(self, bucket: str, make: bool) -> KeyValue:
        name = self.bucket_name(bucket)
        try:
            return await self.js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            if not make:
                raise
            config = js_api.KeyValueConfig(bucket=name, history=1, storage=js_api.StorageType.FILE)
            return await self.js.create_key_value(config)
