"""Replaying a long stretch of the log with a helper process, for the
projector (a rebuild; a gateway catching up with a log it has not projected
yet).

Receiving an event costs ~6 µs of CPU (EventStore's direct delivery: nats-py
alone took ~25), decoding it and planning what it does to the rows
(projection.plan_batch) ~15 µs, all in pure Python: as much as the projector
and PostgreSQL spend applying it. The helper,
`python -m services.gateway.replay`, receives the events, plans them
`batch_size` at a time and writes each batch's plan (pure data) to its
standard output, pickled and length-prefixed; the projector loads, folds and
writes each plan in one transaction, as it does its own, and unpickles the
next plans while PostgreSQL writes. So reading and planning run on one core
while the projector and PostgreSQL run on another; the pipe holds the helper
back when they are slower. Starting the helper takes about a second: shorter
stretches (under HELPER_MIN_EVENTS) are replayed in-process.

The helper reads the log as every reader does (EventStore.stored_event: an
event that is not well-formed is an empty envelope) and plans as the
projector does (`planned_readable`: an event the projection raises on is left
out); each batch's frame names the events it skipped, with why, and the
projector records them as its own skips.
"""

import asyncio
import contextlib
import os
import pickle
import struct
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import BinaryIO, cast

from services.common.cancelling import cancel_and_wait
from services.common.envelope import subject_for
from services.common.eventstore import EventStore, Raw
from services.common.skips import Skips
from services.gateway.plan import PlannedBatch
from services.gateway.planning import planned_readable

HELPER_MIN_EVENTS = 50_000
# How far the projector may read ahead of what it applied (the helper's
# output buffered in this process).
READ_AHEAD_BYTES = 16 * 1024 * 1024
# Plans loaded (unpickled) ahead of the one being applied.
PLANS_AHEAD = 2
_LENGTH = struct.Struct("!Q")


# An event the helper skipped: (sequence, subject, why, reader: "log" or "projector").
Skipped = tuple[int, str, str, str]
# What the helper sends per batch: its plan and the events it skipped.
Replayed = tuple[PlannedBatch, list[Skipped]]


class ReplayHelperError(Exception):
    """The helper process stopped before it replayed the whole stretch."""


async def planned(
    store: EventStore, start_sequence: int, end: int, batch_size: int
) -> AsyncIterator[Replayed]:
    """The plans of the events from `start_sequence` to `end` (stored
    already), `batch_size` events each, in order, made by a helper process,
    each with the events it skipped."""
    helper = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.gateway.replay",
        store.connection.url,
        store.namespace,
        str(start_sequence),
        str(end),
        str(batch_size),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        limit=READ_AHEAD_BYTES,
    )
    assert helper.stdout is not None
    loaded: asyncio.Queue[Replayed | Exception | None] = asyncio.Queue(PLANS_AHEAD)
    loader = asyncio.create_task(_load_plans(helper, helper.stdout, loaded))
    try:
        while (batch := await loaded.get()) is not None:
            if isinstance(batch, Exception):
                raise batch
            yield batch
    finally:
        await cancel_and_wait(loader)
        if helper.returncode is None:
            helper.kill()
        await helper.wait()


async def _load_plans(
    helper: asyncio.subprocess.Process,
    frames: asyncio.StreamReader,
    loaded: asyncio.Queue[Replayed | Exception | None],
) -> None:
    """Loads the helper's plans ahead of their use (unpickling a batch costs
    about a fifth of applying it: it runs while PostgreSQL writes the one
    before), then None; or the error that stopped it."""
    try:
        while True:
            try:
                (length,) = _LENGTH.unpack(await frames.readexactly(_LENGTH.size))
                frame = await frames.readexactly(length)
            except asyncio.IncompleteReadError:
                raise ReplayHelperError(
                    f"the replay helper stopped (exit code {await helper.wait()})"
                ) from None
            if not length:
                await loaded.put(None)
                return
            batch, skipped = pickle.loads(frame)
            assert isinstance(batch, PlannedBatch)
            await loaded.put((batch, skipped))
    except Exception as error:  # noqa: BLE001 - re-raised where the plans are used
        await loaded.put(error)


async def _send(
    url: str, namespace: str, start_sequence: int, end: int, batch_size: int, out: BinaryIO
) -> None:
    """Writes the plans of the events up to `end`, then an empty frame."""
    store = await EventStore.connect(url, namespace, name="gateway-replay")
    store.skips = Skips(quiet=True)  # the projector logs what each frame says it skipped
    try:
        events: list[Raw] = []
        reading = cast(AsyncGenerator[list[Raw], None], store.read_stored(start_sequence))
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                for raw in batch:
                    sequence = raw[0]
                    if sequence > end:
                        break
                    events.append(raw)
                    if len(events) == batch_size or sequence == end:
                        _write(out, pickle.dumps(_planned(store, events), pickle.HIGHEST_PROTOCOL))
                        events = []
                if batch[-1][0] >= end:
                    break
        _write(out, b"")
    finally:
        await store.close()


def _planned(store: EventStore, events: list[Raw]) -> Replayed:
    stored = [store.stored_event(raw) for raw in events]
    skipped = [
        (s.sequence, raw[3], s.skipped, "log") for s, raw in zip(stored, events, strict=True) if s.skipped
    ]
    plan, unplannable = planned_readable(stored)
    for index, reason in unplannable:
        subject = subject_for(store.namespace, stored[index].envelope.aggregate)
        skipped.append((stored[index].sequence, subject, reason, "projector"))
    return PlannedBatch(events[0][0], events[-1][0], plan), skipped


def _write(out: BinaryIO, frame: bytes) -> None:
    out.write(_LENGTH.pack(len(frame)))
    out.write(frame)
    out.flush()


def main() -> None:
    """`python -m services.gateway.replay URL NAMESPACE START END BATCH_SIZE`: the helper."""
    url, namespace, start, end, batch_size = sys.argv[1:6]
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # whatever is printed or logged must not mix with the frames
    asyncio.run(_send(url, namespace, int(start), int(end), int(batch_size), out))


if __name__ == "__main__":
    main()
