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
from services.common.cancelling import cancel_and_wait
from services.common.eventstore import EventStore
from services.common.trial_logs import StoredLogBatch
from services.gateway.features.logs import filters, tail
from services.gateway.features.trials.queries import TrialStatus

POLL_INTERVAL_S = 0.5

StatusLookup = Callable[[int], Awaitable[TrialStatus | None]]
# Whether the trial or task whose logs are read has ended (or is gone).
Ended = Callable[[], Awaitable[bool]]
# Whether a batch that ends an allocation closes the logs (its trial's or task's last allocation).
Closes = Callable[[StoredLogBatch], Awaitable[bool]]


async def trial_logs(
    store: EventStore, request: api_pb2.TrialLogsRequest, status: StatusLookup
) -> AsyncIterator[api_pb2.TrialLogsResponse]:
    """The trial's log lines the request's filters keep, batch by batch (a
    batch left with none is not sent): the first `limit` (0: all), or with
    `tail` the last `limit` (read from the end: see tail.py), then with
    `follow` the new ones until the trial's logs end. ValueError when a
    filter is not one (before anything is read)."""
    chosen = filters.line_filter(request)
    trial_id = request.trial_id
    subject = store.logs.subject(trial_id)

    async def ended() -> bool:
        current = await status(trial_id)
        return current is None or current.ended

    async def closes(stored: StoredLogBatch) -> bool:
        return await _closes_trial(stored, status)

    def kept(stored: StoredLogBatch) -> list[api_pb2.TrialLogsResponse]:
        return [k for response in responses(stored) if (k := filters.kept(response, chosen)) is not None]

    start, left = 1, request.limit or -1
    if request.tail and request.limit:
        last, start = await tail.last_lines(
            store, subject, request.limit, kept, lambda s: _stored_logs(store, subject, s)
        )
        for response in last:
            yield response
        if not request.follow:
            return
        left = -1
    reading = batches(store, subject, request.follow, ended, closes, start)
    async with contextlib.aclosing(reading) as stored_batches:
        async for stored in stored_batches:
            for response in kept(stored):
                if 0 <= left < len(response.lines):
                    response = filters.with_lines(response, response.lines[:left])
                left -= len(response.lines)
                yield response
                if left == 0:
                    return


async def batches(
    store: EventStore, subject: str, follow: bool, ended: Ended, closes: Closes, start: int = 1
) -> AsyncGenerator[StoredLogBatch, None]:
    """The batches of a trial's or a task's logs (its `subject`) from the
    stream's sequence `start`: those stored now, or (`follow`) until its logs
    are closed."""
    if not follow:
        async for stored in _stored_logs(store, subject, start):
            yield stored
        return
    queue: asyncio.Queue[StoredLogBatch] = asyncio.Queue(1000)
    reader = asyncio.create_task(_read(store, subject, queue, start))
    try:
        async for stored in _follow(store, subject, queue, ended, closes, reader, start):
            yield stored
    finally:
        await cancel_and_wait(reader)


async def _follow(
    store: EventStore,
    subject: str,
    queue: asyncio.Queue[StoredLogBatch],
    ended: Ended,
    closes: Closes,
    reader: asyncio.Task[None],
    start: int,
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
            stored_when_closed = await _stored_count(store, subject, start)
        if stored_when_closed is not None and received >= stored_when_closed:
            return


async def _closes_trial(stored: StoredLogBatch, status: StatusLookup) -> bool:
    current = await status(stored.batch.trial_id)
    if current is None:
        return True
    return current.ended and current.current_allocation_id in (None, stored.batch.allocation_id)


async def _stored_logs(store: EventStore, subject: str, start: int = 1) -> AsyncIterator[StoredLogBatch]:
    """What is stored now from the stream's sequence `start`. Counts the
    batches first and follows up to the last of them: the store's
    non-following read may stop before the first message when that is
    already delivered."""
    remaining = await _stored_count(store, subject, start)
    if remaining == 0:
        return
    reading = cast(
        AsyncGenerator[StoredLogBatch, None],
        store.logs.read_subject(subject, follow=True, start_sequence=start),
    )
    async with contextlib.aclosing(reading) as stored_batches:
        async for stored in stored_batches:
            yield stored
            remaining -= 1
            if remaining == 0 or stored.caught_up:
                return


async def _stored_count(store: EventStore, subject: str, start: int = 1) -> int:
    """How many batches of the subject the LOGS stream holds now (from its sequence `start`)."""
    if start > 1:
        return (await store.reader.first_from(store.logs.stream, subject, start))[1]
    info = await store.js.stream_info(store.logs.stream, subjects_filter=subject)
    return (info.state.subjects or {}).get(subject, 0)


async def _read(store: EventStore, subject: str, queue: asyncio.Queue[StoredLogBatch], start: int) -> None:
    async for stored in store.logs.read_subject(subject, follow=True, start_sequence=start):
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
