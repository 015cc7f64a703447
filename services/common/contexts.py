"""Context folders: the JetStream object store where each experiment's
uploaded context archive is kept once, named by its content hash (the
experiment's event refers to the hash)."""

import asyncio
import base64
import contextlib
import hashlib
import io
import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from datetime import UTC, datetime
from typing import BinaryIO

import nats.js.errors
from nats.js import api as js_api
from nats.js.client import JetStreamContext
from nats.js.object_store import (
    OBJ_CHUNKS_PRE_TEMPLATE,
    OBJ_DIGEST_TEMPLATE,
    OBJ_META_PRE_TEMPLATE,
    OBJ_STREAM_TEMPLATE,
)

from services.common.connection import REQUEST_TIMEOUT_S, Connection
from services.common.eventlog import EventStoreError, NotFoundError, namespaced

# One stored chunk of a context archive: at most this, and at most half the
# server's max_payload (1 MB by default; a local cluster's is 8 MB). Fewer,
# larger chunks store and fetch faster (each is one synced write).
CONTEXT_CHUNK_BYTES = 4 * 1024 * 1024
# The meta message of an object replaces the earlier ones on its subject.
ROLLUP_SUBJECT = "sub"


class Contexts:
    """One namespace's stored context archives."""

    def __init__(self, connection: Connection, namespace: str) -> None:
        self.connection = connection
        self.bucket = namespaced("contexts", namespace)

    @property
    def js(self) -> JetStreamContext:
        return self.connection.jetstream()

    async def ensure_bucket(self) -> None:
        """Creates the object store when it is missing."""
        try:
            await self.js.object_store(self.bucket)
        except nats.js.errors.BucketNotFoundError:
            await self.js.create_object_store(self.bucket)

    async def put(self, data: bytes) -> str:
        """Stores a context archive once, by content hash; returns the hash."""
        digest, _ = await self.put_chunks(_one(data))
        return digest

    async def put_chunks(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        """Stores a context archive that arrives in pieces, hashing it on the
        way, and names it by that hash once complete: (hash, size). Memory
        holds one stored chunk. Stored once: a second upload of the same
        bytes is dropped; an upload cut short (an exception from `chunks`)
        leaves nothing behind.

        Written as nats-py's ObjectStore.put writes an object (chunks on a
        subject of their own, then the meta message naming them), because
        the object's name, the hash, is known only at the end."""
        bucket = await self.js.object_store(self.bucket)  # the bucket exists
        stream = OBJ_STREAM_TEMPLATE.format(bucket=self.bucket)
        nuid = uuid.uuid4().hex
        chunk_subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.bucket, obj=nuid)
        chunk_bytes = min(CONTEXT_CHUNK_BYTES, self.connection.nc.max_payload // 2)
        try:
            sha, size, count = await self._store_chunks(chunks, chunk_subject, stream, chunk_bytes)
            digest = sha.hex()
            try:
                await bucket.get_info(digest)
            except nats.js.errors.ObjectNotFoundError:
                await self._publish_meta(digest, nuid, size, count, sha, chunk_bytes)
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

    async def _publish_meta(
        self, digest: str, nuid: str, size: int, chunks: int, sha: bytes, chunk_bytes: int
    ) -> None:
        info = js_api.ObjectInfo(
            name=digest,
            bucket=self.bucket,
            nuid=nuid,
            size=size,
            chunks=chunks,
            mtime=datetime.now(UTC).isoformat(),
            digest=OBJ_DIGEST_TEMPLATE.format(digest=base64.urlsafe_b64encode(sha).decode()),
            options=js_api.ObjectMetaOptions(max_chunk_size=chunk_bytes),
        )
        meta_subject = OBJ_META_PRE_TEMPLATE.format(
            bucket=self.bucket, obj=base64.urlsafe_b64encode(digest.encode()).decode()
        )
        await self.js.publish(
            meta_subject, json.dumps(info.as_dict()).encode(), headers={js_api.Header.ROLLUP: ROLLUP_SUBJECT}
        )

    async def size(self, digest: str) -> int:
        """The stored archive's size; NotFoundError when no such context is stored."""
        return (await self._info(digest)).size or 0

    async def fetch(self, digest: str, into: BinaryIO) -> None:
        """Writes a stored context archive into a file as its chunks arrive,
        checked against its hash at the end. (nats-py's ObjectStore.get
        concatenates the chunks in memory, quadratic in the size, and with
        `writeinto` fetched a 90 MiB context 2-5x slower than this here.)"""
        info = await self._info(digest)
        sha = hashlib.sha256()
        if info.chunks:
            subject = OBJ_CHUNKS_PRE_TEMPLATE.format(bucket=self.bucket, obj=info.nuid)
            stream = OBJ_STREAM_TEMPLATE.format(bucket=self.bucket)
            sub = await self.js.subscribe(subject, stream=stream, ordered_consumer=True)
            try:
                for _ in range(info.chunks):
                    msg = await sub.next_msg(timeout=REQUEST_TIMEOUT_S)
                    sha.update(msg.data)
                    into.write(msg.data)  # in the loop: the next chunk is read once this one is written
            finally:
                await sub.unsubscribe()
        if sha.hexdigest() != digest:
            raise EventStoreError(f"context {digest} is damaged: its stored chunks hash to {sha.hexdigest()}")

    async def _info(self, digest: str) -> js_api.ObjectInfo:
        bucket = await self.js.object_store(self.bucket)
        try:
            return await bucket.get_info(digest)
        except nats.js.errors.ObjectNotFoundError as error:
            raise NotFoundError(f"context {digest} is not stored") from error

    async def get(self, digest: str) -> bytes:
        """The stored archive, whole. A fetch cut short by an outage of nats-server is
        made again from the start once it is back (`Connection.call`: for as long as the
        outage lasts, or the caller's `limit_outage_wait`)."""

        async def attempt() -> bytes:
            buffer = io.BytesIO()
            await self.fetch(digest, buffer)
            return buffer.getvalue()

        return await self.connection.call(attempt)


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
