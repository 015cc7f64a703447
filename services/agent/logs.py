"""Ships a trial process's output to the LOGS stream, line by line, in
batches: one publish per ~50 ms or 500 lines, whichever comes first."""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import structlog

from determined.proto import events_pb2

FLUSH_INTERVAL_S = 0.05
MAX_BATCH_LINES = 500
# A line longer than this is cut into pieces rather than stalling the reader.
MAX_LINE_BYTES = 1 << 20

Publish = Callable[[events_pb2.LogBatch], Awaitable[None]]

log = structlog.get_logger()


class LogShipper:
    def __init__(self, publish: Publish, *, trial_id: int, allocation_id: str, agent_id: str) -> None:
        self._publish = publish
        self._template = events_pb2.LogBatch(
            trial_id=trial_id, allocation_id=allocation_id, agent_id=agent_id
        )
        self._lines: list[events_pb2.LogLine] = []
        self._flushing = asyncio.Lock()
        self._closed = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None

    def add(self, stdtype: str, text: str) -> None:
        self._lines.append(events_pb2.LogLine(timestamp_ns=time.time_ns(), stdtype=stdtype, log=text))

    async def follow(self, stream: asyncio.StreamReader, stdtype: str) -> None:
        """Reads one of the process's pipes until it closes."""
        while True:
            try:
                line = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as error:
                line = error.partial
            except asyncio.LimitOverrunError as error:
                line = await stream.readexactly(error.consumed)
            if not line:
                return
            self.add(stdtype, line.decode(errors="replace").rstrip("\n"))
            if len(self._lines) >= MAX_BATCH_LINES:
                await self.flush()

    def start(self) -> None:
        """Starts flushing every FLUSH_INTERVAL_S until `close`."""
        self._flusher = asyncio.create_task(self._flush_periodically())

    async def close(self) -> None:
        """Publishes what is left as the allocation's last batch. The flusher
        is stopped between two flushes, never in one: a flush cut short
        would lose its lines."""
        self._closed.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush(ended=True)

    async def _flush_periodically(self) -> None:
        while not self._closed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), FLUSH_INTERVAL_S)
            await self.flush()

    async def flush(self, *, ended: bool = False) -> None:
        async with self._flushing:
            lines, self._lines = self._lines, []
            if not lines and not ended:
                return
            batch = events_pb2.LogBatch()
            batch.CopyFrom(self._template)
            batch.lines.extend(lines)
            batch.allocation_ended = ended
            try:
                await self._publish(batch)
            except Exception as error:  # noqa: BLE001 - losing log lines must not lose the trial
                log.warning("log_publish_failed", lines=len(lines), error=str(error))
