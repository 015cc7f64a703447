"""Reading a long stretch of the log in a helper process, for the
projector's replays (a rebuild; a gateway catching up with a log it has not
projected yet).

Receiving an event through nats-py costs about as much CPU as projecting it
(~20 µs: protocol parsing, headers, a message object), so in one process a
replay runs at about half the pace either part could keep. A helper process
receives the events and hands them over undecoded, in lists, through a pipe
(whose buffer holds it back when the projector is slower), so the two run on
two cores. Starting the helper takes about a second: shorter stretches
(under HELPER_MIN_EVENTS) are read in-process.
"""

import asyncio
import multiprocessing
import pickle
from collections.abc import AsyncIterator
from multiprocessing.connection import Connection

from services.common.envelope import Envelope
from services.common.eventstore import EventStore, StoredEvent

HELPER_MIN_EVENTS = 50_000
# The helper sends the events it has received in lists of at least this many
# (fewer at the end): one pipe message and one pickle per list.
SEND_AT_LEAST = 4_000


class ReaderProcessError(Exception):
    """The helper process stopped before it read the whole stretch."""


async def replayed(store: EventStore, start_sequence: int, end: int) -> AsyncIterator[list[StoredEvent]]:
    """The events from `start_sequence` to `end` (stored already), in order,
    in lists, received by a helper process."""
    context = multiprocessing.get_context("spawn")  # a fork would copy this process's event loop and threads
    receiving, sending = context.Pipe(duplex=False)
    helper = context.Process(
        target=_read, args=(store.connection.url, store.namespace, start_sequence, end, sending), daemon=True
    )
    helper.start()
    sending.close()  # the helper's end: once it exits, receiving raises EOFError
    try:
        while True:
            try:
                data = await asyncio.to_thread(receiving.recv_bytes)
            except EOFError:
                raise ReaderProcessError(f"the log reader process stopped (exit code {helper.exitcode})") from None
            if not data:
                return
            yield [StoredEvent(sequence, Envelope.FromString(raw), False) for sequence, raw in pickle.loads(data)]
    finally:
        receiving.close()
        helper.kill()
        await asyncio.to_thread(helper.join)


def _read(url: str, namespace: str, start_sequence: int, end: int, sending: Connection) -> None:
    """The helper: sends lists of (sequence, envelope bytes) up to `end`, then an empty message."""
    asyncio.run(_send(url, namespace, start_sequence, end, sending))


async def _send(url: str, namespace: str, start_sequence: int, end: int, sending: Connection) -> None:
    store = await EventStore.connect(url, namespace, name="gateway-replay")
    try:
        pending: list[tuple[int, bytes]] = []
        async for batch in store.read_stored(start_sequence):
            pending += [(sequence, data) for sequence, data in batch if sequence <= end]
            if len(pending) >= SEND_AT_LEAST or batch[-1][0] >= end:
                sending.send_bytes(pickle.dumps(pending, protocol=pickle.HIGHEST_PROTOCOL))
                pending = []
            if batch[-1][0] >= end:
                break
        if pending:
            sending.send_bytes(pickle.dumps(pending, protocol=pickle.HIGHEST_PROTOCOL))
        sending.send_bytes(b"")
    finally:
        await store.close()
