"""The one client of the event log: JetStream streams EVENTS and LOGS and the
object store of context folders.

Errors (all under EventStoreError):

    EventStoreError
    ├── ConflictError      an expected aggregate version did not match
    └── NotFoundError      a context hash that is not stored
"""

import hashlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, subject_for, wrap

WRONG_LAST_SEQUENCE = 10071
DUPLICATE_WINDOW_S = 600.0
LOG_RETENTION_S = 30 * 24 * 3600.0
APPEND_TIMEOUT_S = 10.0


class EventStoreError(Exception):
    pass


class ConflictError(EventStoreError):
    """The aggregate moved on since the decision was made: refold and retry."""


class NotFoundError(EventStoreError):
    pass


@dataclass(frozen=True)
class StoredEvent:
    sequence: int
    envelope: Envelope
    # True when this was the newest stored event of the read when delivered.
    caught_up: bool


@dataclass(frozen=True)
class StoredLogBatch:
    sequence: int
    batch: events_pb2.LogBatch
    caught_up: bool


class EventStore:
    """Appends and reads events for one namespace ("det" on a cluster)."""

    def __init__(self, nc: NatsClient, namespace: str = "det") -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=APPEND_TIMEOUT_S)
        self.namespace = namespace
        suffix = "" if namespace == "det" else f"_{namespace}"
        self.events_stream = f"EVENTS{suffix}"
        self.logs_stream = f"LOGS{suffix}"
        self.context_bucket = f"contexts{suffix}"

    @classmethod
    async def connect(cls, url: str, namespace: str = "det", name: str = "") -> "EventStore":
        nc = await nats.connect(url, name=name or None, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
        store = cls(nc, namespace)
        await store.ensure_streams()
        return store

    async def close(self) -> None:
        await self.nc.drain()

    async def ensure_streams(self) -> None:
        await self._ensure_stream(
            js_api.StreamConfig(
                name=self.events_stream,
                subjects=[f"{self.namespace}.events.>"],
                duplicate_window=DUPLICATE_WINDOW_S,
                storage=js_api.StorageType.FILE,
            )
        )
        await self._ensure_stream(
            js_api.StreamConfig(
                name=self.logs_stream,
                subjects=[f"{self.namespace}.logs.>"],
                max_age=LOG_RETENTION_S,
                storage=js_api.StorageType.FILE,
            )
        )
        try:
            await self.js.object_store(self.context_bucket)
        except nats.js.errors.BucketNotFoundError:
            await self.js.create_object_store(self.context_bucket)

    async def _ensure_stream(self, config: js_api.StreamConfig) -> None:
        try:
            await self.js.stream_info(config.name or "")
        except nats.js.errors.NotFoundError:
            await self.js.add_stream(config)

    # -- events ---------------------------------------------------------------

    def subject(self, aggregate_name: str) -> str:
        return subject_for(self.namespace, aggregate_name)

    async def append(self, append: Append, *, actor: str) -> tuple[int, Envelope]:
        """Appends one decided event; returns its stream sequence and envelope.

        A duplicate (same message id within the window) returns the original
        sequence and stores nothing.
        """
        envelope = wrap(append, actor=actor, occurred_at_ns=time.time_ns())
        headers = {"Nats-Msg-Id": append.msg_id}
        if append.expected_version is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(append.expected_version)
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
            stored = await self.last_event(append.aggregate)
            if stored is not None and stored.envelope.event_id == append.msg_id:
                return stored.sequence, stored.envelope
            raise ConflictError(f"{append.aggregate}: {error.description}") from error
        return ack.seq, envelope

    async def last_event(self, aggregate_name: str) -> StoredEvent | None:
        """The aggregate's newest event; its sequence is the version an append
        that must not race passes as expected_version."""
        try:
            msg = await self.js.get_last_msg(self.events_stream, self.subject(aggregate_name))
        except nats.js.errors.NotFoundError:
            return None
        return StoredEvent(msg.seq or 0, Envelope.FromString(msg.data or b""), caught_up=False)

    async def last_sequence(self) -> int:
        info = await self.js.stream_info(self.events_stream)
        return info.state.last_seq

    async def last_sequence_of(self, kinds: list[str]) -> int:
        """The sequence of the newest event of these aggregate kinds (0 if none)."""
        subjects = [f"{self.namespace}.events.{kind}.>" for kind in kinds]
        return await self._last_sequence_of(self.events_stream, subjects)

    async def aggregate_versions(self, kind: str) -> dict[str, int]:
        """Aggregate id -> number of events, for every aggregate of one kind."""
        prefix = f"{self.namespace}.events.{kind}."
        info = await self.js.stream_info(self.events_stream, subjects_filter=f"{prefix}>")
        subjects = info.state.subjects or {}
        return {subject[len(prefix):]: count for subject, count in subjects.items()}

    async def read(
        self, kinds: list[str] | None = None, start_sequence: int = 1, follow: bool = True
    ) -> AsyncIterator[StoredEvent]:
        """Events in stream order from `start_sequence`, of the given aggregate
        kinds (all when None). With follow=False it stops at the current end."""
        if kinds is None:
            subjects = [f"{self.namespace}.events.>"]
        else:
            subjects = [f"{self.namespace}.events.{kind}.>" for kind in kinds]
        async for sequence, data, caught_up in self._read(
            self.events_stream, subjects, start_sequence, follow
        ):
            yield StoredEvent(sequence, Envelope.FromString(data), caught_up)

    # -- logs -----------------------------------------------------------------

    def log_subject(self, trial_id: int) -> str:
        return f"{self.namespace}.logs.trial.{trial_id}"

    async def publish_logs(self, batch: events_pb2.LogBatch) -> None:
        await self.js.publish(
            self.log_subject(batch.trial_id), batch.SerializeToString(), stream=self.logs_stream
        )

    async def read_logs(self, trial_id: int, follow: bool) -> AsyncIterator[StoredLogBatch]:
        subjects = [self.log_subject(trial_id)]
        async for sequence, data, caught_up in self._read(self.logs_stream, subjects, 1, follow):
            yield StoredLogBatch(sequence, events_pb2.LogBatch.FromString(data), caught_up)

    # -- contexts -------------------------------------------------------------

    async def put_context(self, data: bytes) -> str:
        """Stores a context archive once, by content hash; returns the hash."""
        digest = hashlib.sha256(data).hexdigest()
        store = await self.js.object_store(self.context_bucket)
        try:
            await store.get_info(digest)
        except nats.js.errors.ObjectNotFoundError:
            await store.put(digest, data)
        return digest

    async def get_context(self, digest: str) -> bytes:
        store = await self.js.object_store(self.context_bucket)
        try:
            result = await store.get(digest)
        except nats.js.errors.ObjectNotFoundError as error:
            raise NotFoundError(f"context {digest} is not stored") from error
        return result.data or b""

    # -- reading --------------------------------------------------------------

    async def _read(
        self, stream: str, subjects: list[str], start_sequence: int, follow: bool
    ) -> AsyncIterator[tuple[int, bytes, bool]]:
        """(sequence, data, caught_up) in order; caught_up is True on the last
        message that was stored when it was delivered."""
        end = None if follow else await self._last_sequence_of(stream, subjects)
        if end is not None and end < start_sequence:
            return
        config = js_api.ConsumerConfig(
            filter_subjects=subjects if len(subjects) > 1 else None,
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(start_sequence, 1),
        )
        sub = await self.js.subscribe(
            subjects[0], stream=stream, ordered_consumer=True, config=config, idle_heartbeat=2.0
        )
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=3600)
                except nats.errors.TimeoutError:
                    continue
                sequence = msg.metadata.sequence.stream
                caught_up = msg.metadata.num_pending == 0 or sequence == end
                yield sequence, msg.data, caught_up
                if end is not None and sequence >= end:
                    return
        finally:
            await sub.unsubscribe()

    async def _last_sequence_of(self, stream: str, subjects: list[str]) -> int:
        """The sequence of the newest message on any of these subjects (0 if none).

        Asked of the stream, not of a new consumer: a consumer's pending count
        can still read 0 just after it is created."""
        last = 0
        for subject in subjects:
            try:
                msg = await self.js.get_last_msg(stream, subject)
            except nats.js.errors.NotFoundError:
                continue
            last = max(last, msg.seq or 0)
        return last
