"""Streaming a trial's or a task's logs from the LOGS stream.

Following a trial's ends when the trial has ended, the batch that closes its last
allocation (`allocation_ended`) has arrived, and so has every batch stored by
then (each agent of a gang closes its own part: the others' last batches
may come after the first, and a gang's allocation ends only once every part
has exited, so by then they are all stored). The trial's state is also polled
every POLL_INTERVAL_S while no batch arrives: a trial that ended without
logs (canceled while queued) or whose agent died before closing its logs
ends the stream too, once nothing more arrives. A task (notebook, command,
...) has one allocation: its closing batch closes the task's logs.
"""

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import cast

from determined.proto import api_pb2
from services.common.eventstore import EventStore
from services.common.trial_logs import StoredLogBatch
from services.gateway.features.trials.queries import TrialStatus

POLL_INTERVAL_S = 0.5

StatusLookup = Callable[[int], Awaitable[TrialStatus | None]]
# Whether the trial or task whose logs are read has ended (or is gone).
Ended = Callable[[], Awaitable[bool]]
# Whether a batch that ends an allocation closes the logs (its trial's or task's last allocation).
Closes = Callable[[StoredLogBatch], Awaitable[bool]]


async def trial_logs(
    store: EventStore, trial_id: int, follow: bool, status: StatusLookup, rank: int | None = None
) -> AsyncIterator[api_pb2.TrialLogsResponse]:
    """The trial's log lines, batch by batch; with `rank`, only the lines that
    rank of a distributed trial wrote (a batch left with none is not sent)."""

    async def ended() -> bool:
        current = await status(trial_id)
        return current is None or current.ended

    async def closes(stored: StoredLogBatch) -> bool:
        return await _closes_trial(stored, status)

    reading = batches(store, store.logs.subject(trial_id), follow, ended, closes)
    async with contextlib.aclosing(reading) as stored_batches:
        async for stored in stored_batches:
            for response in responses(stored):
                if (kept := of_rank(response, rank)) is not None:
                    yield kept


async def batches(
    store: EventStore, subject: str, follow: bool, ended: Ended, closes: Closes
) -> AsyncGenerator[StoredLogBatch, None]:
    """The batches of a trial's or a task's logs (its `subject`): those
    stored now, or (`follow`) until its logs are closed."""
    if not follow:
        async for stored in _stored_logs(store, subject):
            yield stored
        return
    queue: asyncio.Queue[StoredLogBatch] = asyncio.Queue(1000)
    reader = asyncio.create_task(_read(store, subject, queue))
    try:
        async for stored in _follow(store, subject, queue, ended, closes, reader):
            yield stored
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)


async def _follow(
    store: EventStore,
    subject: str,
    queue: asyncio.Queue[StoredLogBatch],
    ended: Ended,
    closes: Closes,
    reader: asyncio.Task[None],
) -> AsyncIterator[StoredLogBatch]:
    received = 0
    # How many batches were stored when the logs were seen closed: follow up to the last of them.
    stored_when_closed: int | None = None
    while True:
        try:
            async with asyncio.timeout(POLL_INTERVAL_S):
                stored = await queue.get()
        except TimeoutError:
            if reader.done() and queue.empty():
                reader.result()  # the reading failed (e.g. nats-server down): the caller is told why
            if await ended():
                return
            continue
        received += 1
        yield stored
        if stored_when_closed is None and stored.batch.allocation_ended and await closes(stored):
            stored_when_closed = await _stored_count(store, subject)
        if stored_when_closed is not None and received >= stored_when_closed:
            return


async def _closes_trial(stored: StoredLogBatch, status: StatusLookup) -> bool:
    current = await status(stored.batch.trial_id)
    if current is None:
        return True
    return current.ended and current.current_allocation_id in (None, stored.batch.allocation_id)


async def _stored_logs(store: EventStore, subject: str) -> AsyncIterator[StoredLogBatch]:
    """What is stored now. Counts the batches first and follows up to the
    last of them: the store's non-following read may stop before the first
    message when that is already delivered."""
    remaining = await _stored_count(store, subject)
    if remaining == 0:
        return
    reading = cast(AsyncGenerator[StoredLogBatch, None], store.logs.read_subject(subject, follow=True))
    async with contextlib.aclosing(reading) as stored_batches:
        async for stored in stored_batches:
            yield stored
            remaining -= 1
            if remaining == 0 or stored.caught_up:
                return


async def _stored_count(store: EventStore, subject: str) -> int:
    """How many batches of the subject the LOGS stream holds now."""
    info = await store.js.stream_info(store.logs.stream, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def _read(store: EventStore, subject: str, queue: asyncio.Queue[StoredLogBatch]) -> None:
    async for stored in store.logs.read_subject(subject, follow=True):
        await queue.put(stored)


def responses(stored: StoredLogBatch) -> list[api_pb2.TrialLogsResponse]:
    batch = stored.batch
    return [
        api_pb2.TrialLogsResponse(
            trial_id=batch.trial_id,
            allocation_id=batch.allocation_id,
            agent_id=batch.agent_id,
            lines=batch.lines,
        )
    ]


def of_rank(response: api_pb2.TrialLogsResponse, rank: int | None) -> api_pb2.TrialLogsResponse | None:
    """The response with only the lines of `rank` (None: every line); None when none is left."""
    if rank is None:
        return response
    lines = [line for line in response.lines if line.HasField("rank") and line.rank == rank]
    if not lines:
        return None
    return api_pb2.TrialLogsResponse(
        trial_id=response.trial_id,
        allocation_id=response.allocation_id,
        agent_id=response.agent_id,
        lines=lines,
    )
