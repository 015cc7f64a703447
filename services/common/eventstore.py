"""The one client of the event log: JetStream streams EVENTS and LOGS and the
object store of context folders.

Errors (all under EventStoreError), and NatsUnavailableError
(services/common/connection.py) from any call made with a limited wait:

    EventStoreError
    ├── ConflictError      an expected aggregate version did not match
    └── NotFoundError      a context hash that is not stored

What is stored may be anything a holder of a part's password published:
every read checks each event (services/common/wellformed.py) and gives one
that is not well-formed as StoredEvent.skipped, an empty envelope, recorded
in `skips` (logged once, counted); `append` refuses to store one.

Every call waits out an outage of nats-server (`Connection.call`): services
for as long as it lasts, the gateway's RPCs a few seconds. A read that follows
the log survives outages of any length and goes on from where it was.

Limits of the streams (the gateway applies them, also to streams that older
versions created; see StreamLimits):

- EVENTS keeps every event for ever: no limit of age, size or count. One event
  is at most nats-server's max_payload (8 MiB on a local cluster). A message
  id is remembered for DUPLICATE_WINDOW_S (600 s).
- LOGS keeps trial logs for at most 30 days and 2 GiB in all (the gateway's
  DET_LOGS_MAX_BYTES): past either, the oldest batches are discarded. One
  batch is at most max_payload; a message id is remembered for 120 s.
"""

import asyncio
import base64
import collections
import contextlib
import functools
import hashlib
import heapq
import io
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import BinaryIO

import nats.errors
import nats.js.errors
import structlog
from google.protobuf.message import DecodeError
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api as js_api
from nats.js.client import JetStreamContext
from nats.js.object_store import (
    OBJ_CHUNKS_PRE_TEMPLATE,
    OBJ_DIGEST_TEMPLATE,
    OBJ_META_PRE_TEMPLATE,
    OBJ_STREAM_TEMPLATE,
)
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

from determined.proto import events_pb2
from services.common.connection import Connection, request_timeout
from services.common.envelope import Append, Envelope, subject_for, wrap
from services.common.skips import Skips
from services.common.wellformed import MAX_EVENT_BYTES, MalformedEventError, decoded, problem

WRONG_LAST_SEQUENCE = 10071
STREAM_NAME_IN_USE = 10058
DUPLICATE_WINDOW_S = 600.0
LOGS_DUPLICATE_WINDOW_S = 120.0
LOGS_MAX_AGE_S = 30 * 24 * 3600.0
LOGS_MAX_BYTES = 2 * 1024**3
APPEND_TIMEOUT_S = 10.0
# The stream settings the gateway brings up to date on existing streams: StreamLimits, and
# allow_direct (a part whose reading nats-server narrows gets single events only by
# `$JS.API.DIRECT.GET.<stream>.<subject>`, which names the subject; deploy/local/credentials.py).
LIMIT_FIELDS = ("max_age", "max_bytes", "max_msg_size", "discard", "duplicate_window", "allow_direct")
# One stored chunk of a context archive: at most this, and at most half the
# server's max_payload (1 MB by default; a local cluster's is 8 MB). Fewer,
# larger chunks store and fetch faster (each is one synced write).
CONTEXT_CHUNK_BYTES = 4 * 1024 * 1024
# A follower holds at most this many delivered, unread messages (see _followed_batches).
READ_BUFFER = 10_000
# A replay asks for this many messages per pull request, at most PULL_AHEAD
# not yet read; a pull consumer that delivers nothing for PULL_STALL_S is made again.
PULL_BATCH = 2_000
PULL_AHEAD = 2 * PULL_BATCH
PULL_STALL_S = 5.0
# $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
JS_ACK_V1_TOKENS = 9
# The meta message of an object replaces the earlier ones on its subject.
ROLLUP_SUBJECT = "sub"


log = structlog.get_logger()


class EventStoreError(Exception):
    pass


class ConflictError(EventStoreError):
    """The aggregate moved on since the decision was made: refold and retry."""


class NotFoundError(EventStoreError):
    pass


class _Stalled(Exception):
    """A pull consumer delivered nothing for PULL_STALL_S (lost in an outage)."""


@dataclass(frozen=True)
class StreamLimits:
    """What the LOGS stream may hold (EVENTS holds everything)."""

    logs_max_bytes: int = LOGS_MAX_BYTES
    logs_max_age_s: float = LOGS_MAX_AGE_S


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


# A message as read from a stream: (sequence, data, caught_up, subject).
Raw = tuple[int, bytes, bool, str]


@dataclass(frozen=True)
class StoredLogBatch:
    sequence: int
    batch: events_pb2.LogBatch
    caught_up: bool


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
        suffix = "" if namespace == "det" else f"_{namespace}"
        self.events_stream = f"EVENTS{suffix}"
        self.logs_stream = f"LOGS{suffix}"
        self.context_bucket = f"contexts{suffix}"
        self._direct = _DirectDelivery(self.nc)

    @property
    def js(self) -> JetStreamContext:
        """JetStream. Its requests time out after APPEND_TIMEOUT_S, or sooner
        where the caller's outage wait is shorter (an RPC's): a request made
        outside `connection.call` also answers within that wait."""
        return self.nc.jetstream(timeout=request_timeout(APPEND_TIMEOUT_S))

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
                name=self.logs_stream,
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
        try:
            await self.js.object_store(self.context_bucket)
        except nats.js.errors.BucketNotFoundError:
            await self.js.create_object_store(self.context_bucket)

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
        event_type = envelope.WhichOneof("payload") or ""
        if self.appends is not None and event_type not in self.appends:
            what = event_type or "an event without a payload"
            raise RefusedEventError(f"{what} is not an event this part appends")
        if (found := problem(envelope)) is not None:
            raise RefusedEventError(f"not appended: {found}")
        if envelope.ByteSize() > MAX_EVENT_BYTES:
            size = envelope.ByteSize()
            raise RefusedEventError(f"not appended: {event_type} is {size} bytes, over {MAX_EVENT_BYTES}")

    def stored_event(self, raw: Raw) -> StoredEvent:
        """A message of the events stream as read: an event that is not
        well-formed is recorded as skipped (logged once, counted) and given as
        an empty envelope (see StoredEvent.skipped)."""
        sequence, data, caught_up, subject = raw
        try:  # "" when the subject is not known: not compared
            return StoredEvent(sequence, decoded(data, subject or None, self.namespace), caught_up)
        except MalformedEventError as error:
            self.skips.record(sequence, subject, str(error))
            return StoredEvent(sequence, Envelope(), caught_up, skipped=str(error))

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
        subjects = [f"{self.namespace}.events.{kind}.>" for kind in kinds]
        return await self._last_sequence_of(self.events_stream, subjects)

    async def aggregate_versions(self, kind: str) -> dict[str, int]:
        """Aggregate id -> number of events, for every aggregate of one kind."""
        prefix = f"{self.namespace}.events.{kind}."
        info = await self.connection.call(
            lambda: self.js.stream_info(self.events_stream, subjects_filter=f"{prefix}>")
        )
        subjects = info.state.subjects or {}
        return {subject[len(prefix) :]: count for subject, count in subjects.items()}

    async def read(
        self, kinds: list[str] | None = None, start_sequence: int = 1, follow: bool = True
    ) -> AsyncIterator[StoredEvent]:
        """Events in stream order from `start_sequence`, of the given aggregate
        kinds (all when None). With follow=False it stops at the current end."""
        if kinds is None:
            subjects = [f"{self.namespace}.events.>"]
        else:
            subjects = [f"{self.namespace}.events.{kind}.>" for kind in kinds]
        async with contextlib.aclosing(
            self._read(self.events_stream, subjects, start_sequence, follow)
        ) as read:
            async for raw in read:
                yield self.stored_event(raw)

    async def read_stored(self, start_sequence: int) -> AsyncIterator[list[Raw]]:
        """Every event from `start_sequence` to the current end as (sequence,
        envelope bytes, caught_up, subject), in lists, undecoded: for a reader
        that decodes them elsewhere (services/gateway/replay.py)."""
        subjects = [f"{self.namespace}.events.>"]
        async with contextlib.aclosing(
            self._read_batches(self.events_stream, subjects, start_sequence, False)
        ) as read:
            async for batch in read:
                yield batch

    async def read_batches(
        self, kinds: list[str] | None = None, start_sequence: int = 1, follow: bool = True
    ) -> AsyncIterator[list[StoredEvent]]:
        """As `read`, in lists of the events that have arrived (at most
        READ_BUFFER), for readers that apply a replay in bulk."""
        if kinds is None:
            subjects = [f"{self.namespace}.events.>"]
        else:
            subjects = [f"{self.namespace}.events.{kind}.>" for kind in kinds]
        async with contextlib.aclosing(
            self._read_batches(self.events_stream, subjects, start_sequence, follow)
        ) as read:
            async for batch in read:
                yield [self.stored_event(raw) for raw in batch]

    # -- logs -----------------------------------------------------------------

    def log_subject(self, trial_id: int) -> str:
        return f"{self.namespace}.logs.trial.{trial_id}"

    async def publish_logs(self, batch: events_pb2.LogBatch, msg_id: str = "") -> None:
        """Publishes one batch, waiting out an outage like `append`; with a
        msg_id, a retry of a batch that landed is stored once (within 120 s)."""
        data = batch.SerializeToString()
        await self.connection.call(
            lambda: self.js.publish(
                self.log_subject(batch.trial_id),
                data,
                stream=self.logs_stream,
                headers={"Nats-Msg-Id": msg_id} if msg_id else None,
            )
        )

    async def read_logs(self, trial_id: int, follow: bool) -> AsyncIterator[StoredLogBatch]:
        subjects = [self.log_subject(trial_id)]
        async for sequence, data, caught_up, subject in self._read(self.logs_stream, subjects, 1, follow):
            try:
                batch = events_pb2.LogBatch.FromString(data)
            except DecodeError as error:  # what an agent's password holder may publish: skipped
                self.skips.record(sequence, subject, f"not a log batch ({error})", reader="logs")
                continue
            yield StoredLogBatch(sequence, batch, caught_up)

    # -- contexts -------------------------------------------------------------

    async def put_context(self, data: bytes) -> str:
        """Stores a context archive once, by content hash; returns the hash."""
        digest, _ = await self.put_context_chunks(_one(data))
        return digest

    async def put_context_chunks(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        """Stores a context archive that arrives in pieces, hashing it on the
        way, and names it by that hash once complete: (hash, size). Memory
        holds one stored chunk. Stored once: a second upload of the same
        bytes is dropped; an upload cut short (an exception from `chunks`)
        leaves nothing behind.

        Written as nats-py's ObjectStore.put writes an object (chunks on a
        subject of their own, then the meta message naming them), because
        the object's name, the hash, is known only at the end."""
        bucket = await self.js.object_store(self.context_bucket)  # the bucket exists
        stream = OBJ_STREAM_TEMPLATE.format(bucket=self.context_bucket)
        nuid = uuid.uuid4().hex
        chunk_subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.context_bucket, obj=nuid)
        chunk_bytes = min(CONTEXT_CHUNK_BYTES, self.nc.max_payload // 2)
        try:
            sha, size, count = await self._store_chunks(chunks, chunk_subject, stream, chunk_bytes)
            digest = sha.hex()
            try:
                await bucket.get_info(digest)
            except nats.js.errors.ObjectNotFoundError:
                await self._publish_context_meta(digest, nuid, size, count, sha, chunk_bytes)
                return digest, size
        except BaseException:
            # Best effort: the error that cut the upload short is what to report.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.js.purge_stream(stream, subject=chunk_subject))
            raise
        await self.js.purge_stream(stream, subject=chunk_subject)  # stored already
        return digest, size

    async def _store_chunks(
        self, chunks: AsyncIterable[bytes], subject: str, stream: str, chunk_bytes: int
    ) -> tuple[bytes, int, int]:
        """Publishes the bytes in chunks of `chunk_bytes`, one stored while the
        next arrives (each store is a synced write); (sha256, size, chunks)."""
        sha = hashlib.sha256()
        size = count = 0
        storing: asyncio.Task[object] | None = None
        try:
            async for chunk in _rechunked(chunks, chunk_bytes):
                sha.update(chunk)
                if storing is not None:
                    await storing
                storing = asyncio.create_task(self.js.publish(subject, chunk, stream=stream))
                size, count = size + len(chunk), count + 1
            if storing is not None:
                await storing
        except BaseException:
            if storing is not None:
                # Let the chunk in flight be stored (or fail), not cancelled: the caller's purge
                # goes to JetStream's API, which may act before the stream stores a publish that
                # already left, and that chunk would then stay behind.
                with contextlib.suppress(BaseException):  # retrieved, so that nothing is logged of it
                    await asyncio.shield(storing)
            raise
        return sha.digest(), size, count

    async def _publish_context_meta(
        self, digest: str, nuid: str, size: int, chunks: int, sha: bytes, chunk_bytes: int
    ) -> None:
        info = js_api.ObjectInfo(
            name=digest,
            bucket=self.context_bucket,
            nuid=nuid,
            size=size,
            chunks=chunks,
            mtime=datetime.now(UTC).isoformat(),
            digest=OBJ_DIGEST_TEMPLATE.format(digest=base64.urlsafe_b64encode(sha).decode()),
            options=js_api.ObjectMetaOptions(max_chunk_size=chunk_bytes),
        )
        meta_subject = OBJ_META_PRE_TEMPLATE.format(
            bucket=self.context_bucket, obj=base64.urlsafe_b64encode(digest.encode()).decode()
        )
        await self.js.publish(
            meta_subject, json.dumps(info.as_dict()).encode(), headers={js_api.Header.ROLLUP: ROLLUP_SUBJECT}
        )

    async def context_size(self, digest: str) -> int:
        """The stored archive's size; NotFoundError when no such context is stored."""
        return (await self._context_info(digest)).size or 0

    async def fetch_context(self, digest: str, into: BinaryIO) -> None:
        """Writes a stored context archive into a file as its chunks arrive,
        checked against its hash at the end. (nats-py's ObjectStore.get
        concatenates the chunks in memory, quadratic in the size, and with
        `writeinto` fetched a 90 MiB context 2-5x slower than this here.)"""
        info = await self._context_info(digest)
        sha = hashlib.sha256()
        if info.chunks:
            subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.context_bucket, obj=info.nuid)
            stream = OBJ_STREAM_TEMPLATE.format(bucket=self.context_bucket)
            sub = await self.js.subscribe(subject, stream=stream, ordered_consumer=True)
            try:
                for _ in range(info.chunks):
                    msg = await sub.next_msg(timeout=APPEND_TIMEOUT_S)
                    sha.update(msg.data)
                    into.write(msg.data)  # in the loop: the next chunk is read once this one is written
            finally:
                await sub.unsubscribe()
        if sha.hexdigest() != digest:
            raise EventStoreError(f"context {digest} is damaged: its stored chunks hash to {sha.hexdigest()}")

    async def _context_info(self, digest: str) -> js_api.ObjectInfo:
        bucket = await self.js.object_store(self.context_bucket)
        try:
            return await bucket.get_info(digest)
        except nats.js.errors.ObjectNotFoundError as error:
            raise NotFoundError(f"context {digest} is not stored") from error

    async def get_context(self, digest: str) -> bytes:
        buffer = io.BytesIO()
        await self.fetch_context(digest, buffer)
        return buffer.getvalue()

    # -- reading --------------------------------------------------------------

    async def _read(
        self, stream: str, subjects: list[str], start_sequence: int, follow: bool
    ) -> AsyncGenerator[Raw, None]:
        """(sequence, data, caught_up, subject) in order, one at a time (see _read_batches)."""
        async with contextlib.aclosing(self._read_batches(stream, subjects, start_sequence, follow)) as read:
            async for batch in read:
                for message in batch:
                    yield message

    async def _read_batches(
        self, stream: str, subjects: list[str], start_sequence: int, follow: bool
    ) -> AsyncGenerator[list[Raw], None]:
        """(sequence, data, caught_up, subject) in order, in lists of whatever has
        arrived; caught_up is True on the last message that was stored when it
        was delivered.

        What is stored when the read starts is replayed through pull
        consumers (`_pulled_batches`): asked for in batches, so a reader that
        is slower than nats-server holds two batches at most. A push
        consumer would outrun it: past its flow-control window nats-server
        waits, but nats-py answers the "stalled" heartbeat that follows every
        idle_heartbeat whether or not the reader took what it holds, so a
        slow reader's buffer grows by a window per heartbeat (1 GB on a
        replay of a million events). Several subjects are replayed one
        consumer each, merged in stream order (`_merged_batches`): nats-server
        2.15 serves a consumer of several filters 5 to 15 times slower than
        one of a single filter, and slower as the log grows. With `follow`,
        an ordered push consumer then follows from the end of the replay."""
        stored_end = await self._last_sequence_of(stream, subjects)
        if stored_end >= start_sequence:
            if len(subjects) > 1:
                replay = self._merged_batches(stream, subjects, start_sequence, stored_end)
            else:
                replay = self._pulled_batches(stream, subjects[0], start_sequence, stored_end)
            try:
                async for batch in replay:
                    yield batch
            finally:
                await replay.aclose()
            start_sequence = stored_end + 1
        if follow:
            async with contextlib.aclosing(
                self._followed_batches(stream, subjects, start_sequence)
            ) as followed:
                async for batch in followed:
                    yield batch

    async def _followed_batches(
        self, stream: str, subjects: list[str], start_sequence: int
    ) -> AsyncGenerator[list[Raw], None]:
        """Follows the log from `start_sequence`: one ordered push consumer per
        subject (`_Follower`), merged in stream order. Not one consumer of
        several filters: its create request names no filter, so nats-server's
        permissions could not narrow what a part reads (deploy/local/credentials.py).

        A message is passed on once no other subject can still deliver an
        older one: its follower holds a newer one, or the stream holds nothing
        of its subject that it has not delivered (`_in_order`)."""
        arrived = asyncio.Event()
        followers = [_Follower(subject, max(start_sequence, 1), arrived) for subject in subjects]
        try:
            for follower in followers:
                subscribe = functools.partial(self._ordered_consumer, stream, follower)
                follower.sub = await self.connection.call(subscribe)
            while True:
                await arrived.wait()
                arrived.clear()
                # Again until nothing more can be passed on: what one batch took may let more go.
                while batch := await self._in_order(stream, followers):
                    yield batch
        finally:
            for follower in followers:
                if follower.sub is not None:
                    await follower.sub.unsubscribe()

    async def _ordered_consumer(self, stream: str, follower: "_Follower") -> Subscription:
        """An ordered push consumer of the follower's subject from its next
        expected sequence, taken by its callback (not `next_msg`: a task and
        a timer per message). It goes on by itself after an outage, from the
        last sequence it received + 1, or from sequence 1 when it had received
        nothing yet (the follower drops what is below what it expects)."""
        return await self.js.subscribe(  # a new config per attempt: nats-py fills it in
            follower.subject,
            stream=stream,
            ordered_consumer=True,
            idle_heartbeat=2.0,
            cb=follower.take,
            # nats-py drops what passes these limits (and its ordered consumer
            # then skips it for good): bounded by `take` instead.
            pending_msgs_limit=0,
            pending_bytes_limit=0,
            config=_NamedByInbox(
                deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=follower.expected,
            ),
        )

    async def _in_order(self, stream: str, followers: "list[_Follower]") -> list[Raw]:
        """Takes what the followers hold up to the newest sequence below which
        none can deliver anything more, merged in stream order. A follower
        that holds nothing bounds it at what it delivered last, unless the
        stream holds nothing newer of its subject (asked of the stream, all
        such followers at once). caught_up is True on the last message taken
        when it was the newest of its subject when delivered and nothing is
        left held."""
        held = [follower.held[-1][0] for follower in followers if follower.held]
        if not held:
            return []
        newest_held = max(held)
        bounds = [follower.held[-1][0] for follower in followers if follower.held]
        unsure = [f for f in followers if not f.held and f.delivered < newest_held]
        newest = await asyncio.gather(*(self._last_sequence_of(stream, [f.subject]) for f in unsure))
        bounds += [f.delivered for f, last in zip(unsure, newest, strict=True) if last > f.delivered]
        bound = min(bounds)
        taken = list(heapq.merge(*(follower.taken_until(bound) for follower in followers)))
        done = not any(follower.held for follower in followers)
        return [
            (sequence, data, done and index == len(taken) - 1 and pending == 0, subject)
            for index, (sequence, data, pending, subject) in enumerate(taken)
        ]

    async def _pulled_batches(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """The messages of `subject` from `start_sequence` to `end` (stored
        already), through an ephemeral pull consumer: PULL_BATCH messages per
        request, at most PULL_AHEAD asked for and not yet read. A consumer
        that delivers nothing for PULL_STALL_S (lost in an outage of
        nats-server) is made again from the next expected sequence."""
        expected = max(start_sequence, 1)
        while expected <= end:
            try:
                async with contextlib.aclosing(self._pulled_once(stream, subject, expected, end)) as batches:
                    async for batch in batches:
                        expected = batch[-1][0] + 1
                        yield batch
                return  # the attempt read every message of `subject` up to `end`
            except _Stalled:
                log.info("replay_consumer_remade", subject=subject, from_sequence=expected)

    async def _pulled_once(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """One attempt of _pulled_batches: ends early (without error) when its
        consumer stalls; its inbox goes with it, so that nothing it asked for
        arrives later."""
        arrived: collections.deque[tuple[bytes, bytes, bytes]] = collections.deque()
        waiting = asyncio.Event()

        def take(reply: bytes, data: bytes, stored_on: bytes) -> None:
            arrived.append((reply, data, stored_on))
            waiting.set()

        made = functools.partial(self._pull_consumer, stream, subject, start_sequence)
        consumer, stored = await self.connection.call(made)
        inbox = self.nc.new_inbox()
        sub = await self._direct.subscribe(inbox, take)
        expected, requested, received = start_sequence, 0, 0
        try:
            while expected <= end and received < stored:
                while requested < min(stored, received + PULL_AHEAD):
                    size = min(PULL_BATCH, stored - requested)
                    request = json.dumps({"batch": size}).encode()
                    await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, inbox)
                    requested += size
                try:
                    async with asyncio.timeout(PULL_STALL_S):
                        await waiting.wait()
                except TimeoutError:
                    raise _Stalled from None
                waiting.clear()
                batch = []
                while arrived:
                    reply, data, stored_on = arrived.popleft()
                    if not reply:
                        continue  # a status (408 and the like): what it says, the stall timeout covers
                    received += 1
                    sequence = _stream_sequence(reply)
                    if expected <= sequence <= end:
                        expected = sequence + 1
                        batch.append((sequence, data, sequence == end, stored_on.decode(errors="replace")))
                if batch:
                    yield batch
        finally:
            await self._direct.unsubscribe(sub)
            await self._delete_consumer(stream, consumer)

    async def _pull_consumer(self, stream: str, subject: str, start_sequence: int) -> tuple[str, int]:
        """An ephemeral pull consumer of `subject` from `start_sequence`, and
        how many of its messages are stored."""
        config = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_sequence,
            ack_policy=js_api.AckPolicy.NONE,
            filter_subject=subject,
            inactive_threshold=PULL_STALL_S * 4,
            mem_storage=True,
            # Named: nats-py then creates it through the API subject that names its filter.
            name=uuid.uuid4().hex,
        )
        info = await self.js.add_consumer(stream, config)
        return info.name, info.num_pending or 0

    async def _delete_consumer(self, stream: str, consumer: str) -> None:
        """Best effort: an ephemeral consumer goes by itself when inactive."""
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await self.js.delete_consumer(stream, consumer)

    async def _merged_batches(
        self, stream: str, subjects: list[str], start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """The messages of several subjects from `start_sequence` to `end`, all
        stored already, in stream order: one pull consumer per subject,
        merged. A message is passed on once every reader that is not done
        holds one at least as new; caught_up is True on `end`."""
        readers = {
            subject: self._pulled_batches(stream, subject, start_sequence, end) for subject in subjects
        }
        held: dict[str, collections.deque[Raw]] = {s: collections.deque() for s in subjects}
        done: set[str] = set()
        try:
            while True:
                for subject, reader in readers.items():
                    if subject not in done and not held[subject]:
                        batch = await anext(reader, None)
                        if batch is None:
                            done.add(subject)
                        else:
                            held[subject].extend(batch)
                waiting = [held[subject][-1][0] for subject in subjects if subject not in done]
                bound = min(waiting, default=end)
                ready = heapq.merge(*(_taken_until(messages, bound) for messages in held.values()))
                merged = [(sequence, data, sequence == end, subject) for sequence, data, _, subject in ready]
                if merged:
                    yield merged
                if len(done) == len(subjects) and not any(held.values()):
                    return
        finally:
            for reader in readers.values():
                await reader.aclose()

    async def _last_sequence_of(self, stream: str, subjects: list[str]) -> int:
        """The sequence of the newest message on any of these subjects (0 if none).

        Asked of the stream, not of a new consumer: a consumer's pending count
        can still read 0 just after it is created."""
        return await self.connection.call(lambda: self._newest_of(stream, subjects))

    async def _newest_of(self, stream: str, subjects: list[str]) -> int:
        last = 0
        for subject in subjects:
            try:
                msg = await self.js.get_last_msg(stream, subject, direct=True)
            except nats.js.errors.NotFoundError:
                continue
            last = max(last, msg.seq or 0)
        return last


@dataclass
class _NamedByInbox(js_api.ConsumerConfig):
    """An ordered push consumer's config whose name follows its delivery
    inbox. nats-py creates a consumer that has a name (and one filter)
    through `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, the form
    whose filter nats-server's permissions check; and it makes an ordered
    consumer again after a gap from this config with a new inbox, so the
    new consumer gets a new name (dataclasses.replace runs __post_init__)."""

    def __post_init__(self) -> None:
        if self.deliver_subject:
            self.name = hashlib.sha256(self.deliver_subject.encode()).hexdigest()[:32]


class _Follower:
    """What one ordered consumer of one subject delivered and the reader has
    not taken yet: at most READ_BUFFER messages, then its callback waits."""

    def __init__(self, subject: str, start_sequence: int, arrived: asyncio.Event) -> None:
        self.subject = subject
        # Every message of the subject below it has been delivered (or precedes the read).
        self.expected = start_sequence
        # (sequence, data, messages pending when delivered, subject)
        self.held: collections.deque[tuple[int, bytes, int, str]] = collections.deque()
        self.sub: Subscription | None = None
        self._arrived = arrived
        self._room = asyncio.Event()
        self._room.set()

    @property
    def delivered(self) -> int:
        return self.expected - 1

    async def take(self, msg: Msg) -> None:
        sequence, pending = _stream_position(msg.reply)
        if sequence >= self.expected:  # below: a consumer that started over repeats them
            self.expected = sequence + 1
            self.held.append((sequence, msg.data, pending, msg.subject))
            self._arrived.set()
        if len(self.held) >= READ_BUFFER:
            self._room.clear()
            await self._room.wait()

    def taken_until(self, bound: int) -> list[tuple[int, bytes, int, str]]:
        taken = []
        while self.held and self.held[0][0] <= bound:
            taken.append(self.held.popleft())
        self._room.set()
        return taken


class _DirectDelivery:
    """Hands the messages of some subscriptions of a nats-py client straight
    to a plain function, as (reply subject, data, subject) bytes.

    nats-py builds every delivered message: parses its headers with a
    general-purpose parser (a stored event carries two, Nats-Msg-Id and the
    expected sequence), decodes subject and reply, makes a Msg, queues it to
    the subscription's task, which awaits the callback: ~25 µs per message,
    as much as the rest of a replay. A replay needs only the reply subject
    (the stream sequence is in it), the data and the subject (which a
    reader checks the event against: wellformed.py). So the client's protocol
    parser is replaced by one that hands these subscriptions' messages over
    as they come (_DirectParser: ~3 µs each), and its dispatch
    (`_process_msg`, which nats-py's parser calls with each message's parts)
    by one that hands over those nats-py's parser takes (after any other
    protocol line). Headers are never parsed. Every other message takes
    nats-py's own path."""

    def __init__(self, nc: NatsClient) -> None:
        self._receivers: dict[int, Callable[[bytes, bytes, bytes], None]] = {}
        self._nats_dispatch = nc._process_msg
        self._nc = nc
        nc._process_msg = self._dispatch  # type: ignore[method-assign]
        nc._ps = _DirectParser(nc, self._receivers)

    async def subscribe(self, subject: str, receive: Callable[[bytes, bytes, bytes], None]) -> Subscription:
        # Without a callback nats-py starts no task for it; nothing reaches its queue.
        sub = await self._nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        self._receivers[sub._id] = receive
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        self._receivers.pop(sub._id, None)
        await sub.unsubscribe()

    async def _dispatch(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        receive = self._receivers.get(sid)
        if receive is None:
            await self._nats_dispatch(sid, subject, reply, data, headers)
        else:
            receive(reply, data, subject)


class _DirectParser(Parser):
    """nats-py's protocol parser, but the messages of direct subscriptions
    (`HMSG <subject> <sid> <reply> <header bytes> <total bytes>`) at the
    front of what arrived are handed over first, cut out of the buffer by
    offsets; from the first other protocol line on, nats-py's parser takes
    the rest."""

    def __init__(self, nc: NatsClient, receivers: dict[int, Callable[[bytes, bytes, bytes], None]]) -> None:
        super().__init__(nc)
        self._receivers = receivers

    async def parse(self, data: bytes = b"") -> None:
        self.buf.extend(data)
        if self.state != AWAITING_CONTROL_LINE or not self._handed_over():
            await super().parse()

    def _handed_over(self) -> bool:
        """Hands over the direct messages at the front of the buffer; True
        when what is left is nothing or the start of one (to be completed by
        what arrives next)."""
        buf, taken = self.buf, 0
        try:
            while buf.startswith(b"HMSG ", taken):
                end_of_line = buf.find(b"\r\n", taken)
                if end_of_line < 0:
                    return True
                fields = buf[taken:end_of_line].split(b" ")
                receive = self._receivers.get(int(fields[2])) if len(fields) == 6 else None
                if receive is None:
                    return False
                payload, end = end_of_line + 2 + int(fields[4]), end_of_line + 2 + int(fields[5])
                if len(buf) < end + 2:
                    return True
                receive(bytes(fields[3]), bytes(buf[payload:end]), bytes(fields[1]))
                taken = end + 2
            return len(buf) == taken
        finally:
            del buf[:taken]


def _taken_until(messages: "collections.deque[Raw]", bound: int) -> list[Raw]:
    """Takes the messages up to sequence `bound` off the front of `messages`."""
    taken = []
    while messages and messages[0][0] <= bound:
        taken.append(messages.popleft())
    return taken


def _stream_sequence(reply: bytes) -> int:
    """The stream sequence of a delivered JetStream message, from its reply subject."""
    tokens = reply.split(b".")
    if len(tokens) == JS_ACK_V1_TOKENS:
        return int(tokens[5])
    return _stream_position(reply.decode())[0]


def _stream_position(reply: str) -> tuple[int, int]:
    """(stream sequence, messages pending) of a delivered JetStream message,
    read from its reply subject without building nats-py's Metadata (which
    costs a datetime per message)."""
    tokens = Msg.Metadata._get_metadata_fields(reply)
    if len(tokens) == JS_ACK_V1_TOKENS:
        return int(tokens[5]), int(tokens[8])
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.NumPending])


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _rechunked(pieces: AsyncIterable[bytes], size: int) -> AsyncIterator[bytes]:
    """The same bytes in chunks of `size` (the last one shorter), whatever
    sizes the pieces came in."""
    pending = bytearray()
    async for piece in pieces:
        pending += piece
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)
