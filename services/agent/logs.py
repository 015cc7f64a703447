"""Ships a trial process's output to the LOGS stream: every line, in order,
once, across NATS outages, without ever making the process wait.

Reading the process's pipes never waits for NATS: lines go into a
`LogBuffer`, and one sender task publishes from it, one batch at a time (a
batch every ~50 ms, or as soon as 500 lines wait), each with a message id of
its own (`logs-<allocation>-<agent>-<n>`: each agent of a distributed
allocation ships its own part's) so that a batch retried after a lost
acknowledgement is stored once. A publish waits out a NATS outage (the event
store does); should it give up, the sender tries the batch again with
backoff, saying so once when shipping stalls and once when it resumes. The
lines meanwhile wait in memory up to `memory_bytes`, then in a file in the
allocation's folder up to `spill_bytes`; past that (or when that file cannot
be written) they are counted, dropped, and a line saying how many takes their
place. The last batch of an allocation says so (`allocation_ended`).

A line a distributed trial's worker wrote through `determined.launch.wrap_rank`
starts with `[rank=N] `: the prefix goes, and N becomes the line's `rank`
(what `det trial logs --rank` filters on).

A container's lines come led by the daemon's timestamp (`follow(...,
timestamped=True)`): it becomes the line's time. With a `progress_path`, the
shipper notes before each batch how many batches it shipped, the newest time
of each stream they hold, and the batch in flight (`ShippedProgress`); once
the batch is acknowledged, that it is no longer in flight. A restarted agent
that reattaches the container sends the batch in flight again under its msg
id (stored once either way), then ships from there on under the next batch
numbers: nothing lost, nothing twice.
"""

import asyncio
import base64
import contextlib
import json
import os
import re
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import structlog

from determined.proto import events_pb2
from services.common.connection import OUTAGE_ERRORS, NatsUnavailableError

FLUSH_INTERVAL_S = 0.05
MAX_BATCH_LINES = 500
MAX_BATCH_BYTES = 1 << 20
# A line longer than this is cut into pieces rather than stalling the reader.
MAX_LINE_BYTES = 1 << 20
MEMORY_BYTES = 8 << 20
SPILL_BYTES = 256 << 20
SPILL_FILE = ".determined-unsent-logs"
RETRY_MIN_S = 0.1
RETRY_MAX_S = 2.0
# What a publish raises while NATS is unreachable (when the store gives up
# waiting): the batch is tried again. Anything else is a batch NATS will never
# take: it is dropped, with a warning.
UNREACHABLE: tuple[type[Exception], ...] = (*OUTAGE_ERRORS, NatsUnavailableError)

Publish = Callable[[events_pb2.LogBatch, str], Awaitable[None]]
_RANK_PREFIX = re.compile(r"\[rank=(\d{1,9})\] ")
_LENGTH = struct.Struct(">I")
# A line's tag and length in a batch, beyond its own encoding (at most).
_FRAMING = 6

log = structlog.get_logger()


@dataclass(frozen=True)
class ShippedProgress:
    """What a shipper shipped: its batches, the newest line time of each stream,
    and the batch it had in flight (base64 of the LogBatch; "": none), which
    those count."""

    batches: int = 0
    stdout_ns: int = 0
    stderr_ns: int = 0
    pending: str = ""

    def since(self) -> dict[str, int]:
        return {"stdout": self.stdout_ns, "stderr": self.stderr_ns}


def read_progress(path: Path) -> ShippedProgress:
    """The progress noted at `path` (none: nothing shipped)."""
    try:
        found = json.loads(path.read_text())
        return ShippedProgress(
            int(found["batches"]),
            int(found["stdout_ns"]),
            int(found["stderr_ns"]),
            str(found.get("pending", "")),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return ShippedProgress()


def timestamp_ns(stamp: str) -> int:
    """An RFC 3339 UTC time (Docker's, to the nanosecond) in ns since the epoch (0: not one)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    try:
        seconds = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0
    digits = fraction[:9].ljust(9, "0")
    return int(seconds) * 1_000_000_000 + int(digits) if digits.isdigit() else 0


class LogBuffer:
    """Lines waiting to be shipped, oldest first: in memory up to
    `memory_bytes`, then appended to `spill_path` up to `spill_bytes`, then
    counted as dropped. Once lines are in the file, new ones follow them
    there until the file is read to its end, so the order holds."""

    def __init__(self, spill_path: Path | None, *, memory_bytes: int, spill_bytes: int) -> None:
        self._memory: deque[events_pb2.LogLine] = deque()
        self._memory_bytes = 0
        self._memory_limit = memory_bytes
        self._spill_path = spill_path
        self._spill_limit = spill_bytes
        self._writer: BinaryIO | None = None
        self._reader: BinaryIO | None = None
        self._spilled_bytes = 0
        self._spilled_lines = 0
        self.dropped = 0
        # What `peek` returned, until `pop`: (lines from memory, lines and bytes from the file).
        self._peeked = (0, 0, 0)

    def __len__(self) -> int:
        return len(self._memory) + self._spilled_lines

    def add(self, line: events_pb2.LogLine) -> None:
        if self.dropped and self._has_room(_DROPPED_NOTE_BYTES + _size(line)):
            note, self.dropped = self.dropped, 0
            self._put(_dropped_note(note, line.timestamp_ns))
        if self._has_room(_size(line)):
            self._put(line)
        else:
            self.dropped += 1

    def note_dropped(self) -> None:
        """Puts the line about dropped lines now, whatever the room: the input ended."""
        if self.dropped:
            note, self.dropped = self.dropped, 0
            self._put(_dropped_note(note, time.time_ns()), force=True)

    def peek(self, max_lines: int, max_bytes: int) -> list[events_pb2.LogLine]:
        """The oldest lines (at least one if any): they stay until `pop`."""
        lines: list[events_pb2.LogLine] = []
        size = 0
        for line in self._memory:
            if len(lines) >= max_lines or (lines and size + _size(line) > max_bytes):
                self._peeked = (len(lines), 0, 0)
                return lines
            lines.append(line)
            size += _size(line)
        if lines or not self._spilled_lines:
            self._peeked = (len(lines), 0, 0)
            return lines
        try:
            return self._peek_file(max_lines, max_bytes)
        except (OSError, ValueError, struct.error) as error:
            self._lose_file(error)
            return self.peek(max_lines, max_bytes)

    def _peek_file(self, max_lines: int, max_bytes: int) -> list[events_pb2.LogLine]:
        assert self._reader is not None and self._writer is not None
        self._writer.flush()
        lines: list[events_pb2.LogLine] = []
        size = 0
        start = self._reader.tell()
        while len(lines) < self._spilled_lines and len(lines) < max_lines:
            (length,) = _LENGTH.unpack(self._reader.read(_LENGTH.size))
            if lines and size + length + _FRAMING > max_bytes:
                self._reader.seek(-_LENGTH.size, os.SEEK_CUR)
                break
            lines.append(events_pb2.LogLine.FromString(self._reader.read(length)))
            size += length + _FRAMING
        read = self._reader.tell() - start
        self._reader.seek(start)
        self._peeked = (0, len(lines), read)
        return lines

    def pop(self) -> None:
        """Drops the lines `peek` returned: they are shipped."""
        from_memory, from_file, read = self._peeked
        self._peeked = (0, 0, 0)
        for _ in range(from_memory):
            self._memory_bytes -= _size(self._memory.popleft())
        if from_file:
            assert self._reader is not None
            self._reader.seek(read, os.SEEK_CUR)
            self._spilled_lines -= from_file
            if not self._spilled_lines:
                self.close()

    def close(self) -> None:
        """Removes the spill file, and whatever it still holds."""
        for file in (self._writer, self._reader):
            if file is not None:
                file.close()
        self._writer = self._reader = None
        self._spilled_bytes = self._spilled_lines = 0
        if self._spill_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._spill_path.unlink()

    def _has_room(self, size: int) -> bool:
        if not self._spilled_lines and self._memory_bytes + size <= self._memory_limit:
            return True
        return self._spill_path is not None and self._spilled_bytes + size <= self._spill_limit

    def _put(self, line: events_pb2.LogLine, *, force: bool = False) -> None:
        size = _size(line)
        memory_fits = self._memory_bytes + size <= self._memory_limit
        if not self._spilled_lines and (memory_fits or force or self._spill_path is None):
            self._memory.append(line)
            self._memory_bytes += size
            return
        try:
            if self._writer is None:
                assert self._spill_path is not None
                self._writer = open(self._spill_path, "wb")  # noqa: SIM115 - kept open while lines wait there
                self._reader = open(self._spill_path, "rb")  # noqa: SIM115
            data = line.SerializeToString()
            self._writer.write(_LENGTH.pack(len(data)) + data)
        except OSError as error:  # a full disk: what the file held is lost, not the trial
            self.dropped += 1
            self._lose_file(error)
            return
        self._spilled_bytes += size
        self._spilled_lines += 1

    def _lose_file(self, error: Exception) -> None:
        log.warning(
            "log_spill_file_lost", path=str(self._spill_path), lines=self._spilled_lines, error=str(error)
        )
        self.dropped += self._spilled_lines
        self.close()


class LogShipper:
    def __init__(
        self,
        publish: Publish,
        *,
        trial_id: int,
        allocation_id: str,
        agent_id: str,
        spill_path: Path | None = None,
        memory_bytes: int = MEMORY_BYTES,
        spill_bytes: int = SPILL_BYTES,
        progress_path: Path | None = None,
    ) -> None:
        self._publish = publish
        self._progress_path = progress_path
        self._progress = read_progress(progress_path) if progress_path is not None else ShippedProgress()
        self._template = events_pb2.LogBatch(
            trial_id=trial_id, allocation_id=allocation_id, agent_id=agent_id
        )
        self._buffer = LogBuffer(spill_path, memory_bytes=memory_bytes, spill_bytes=spill_bytes)
        self._batches = self._progress.batches
        self._closing = False
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None

    def add(self, stdtype: str, text: str, timestamp_ns: int = 0) -> None:
        self._buffer.add(log_line(stdtype, text, timestamp_ns or time.time_ns()))
        if len(self._buffer) >= MAX_BATCH_LINES:
            self._wake.set()

    async def follow(self, stream: asyncio.StreamReader, stdtype: str, *, timestamped: bool = False) -> None:
        """Reads one of the process's pipes until it closes (`timestamped`: each
        line led by its time and a space, as Docker's logs give them)."""
        while True:
            try:
                line = await stream.readuntil(b"\n")
            except asyncio.IncompleteReadError as error:
                line = error.partial
            except asyncio.LimitOverrunError as error:
                line = await stream.readexactly(error.consumed)
            if not line:
                return
            text = line.decode(errors="replace").rstrip("\n")
            if timestamped:
                stamp, _, text = text.partition(" ")
                self.add(stdtype, text, timestamp_ns(stamp))
            else:
                self.add(stdtype, text)

    def start(self) -> None:
        """Starts shipping; `close` ends it."""
        if self._sender is None:
            self._sender = asyncio.create_task(self._send(), name=f"logs-{self._template.allocation_id}")

    async def close(self) -> None:
        """The process's output ended: returns once every line is shipped, the
        last batch marked as the allocation's last (however long NATS takes)."""
        self._closing = True
        self._buffer.note_dropped()
        self.start()
        self._wake.set()
        assert self._sender is not None
        await asyncio.shield(self._sender)

    def abandon(self) -> None:
        """The agent is going away: stops shipping, leaving what was not shipped."""
        if self._sender is not None:
            self._sender.cancel()
        self._buffer.close()

    async def _send(self) -> None:
        try:
            await self._resend_pending()
            while True:
                await self._ready()
                lines = self._buffer.peek(MAX_BATCH_LINES, MAX_BATCH_BYTES)
                last = self._closing and len(lines) == len(self._buffer)
                if lines or last:
                    await self._ship(lines, ended=last)
                    self._buffer.pop()
                if last:
                    return
        finally:
            self._buffer.close()

    async def _ready(self) -> None:
        """Waits for the next batch: FLUSH_INTERVAL_S, or less when one is full or the output ended."""
        if self._closing or len(self._buffer) >= MAX_BATCH_LINES:
            return
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_INTERVAL_S):
                await self._wake.wait()

    async def _ship(self, lines: list[events_pb2.LogLine], *, ended: bool) -> None:
        batch = events_pb2.LogBatch()
        batch.CopyFrom(self._template)
        batch.lines.extend(lines)
        batch.allocation_ended = ended
        number = self._batches
        self._batches += 1
        self._note_progress(lines, pending=batch)  # shipped, or in flight: sent again if need be
        await self._publish_batch(batch, number)
        self._note_progress([], pending=None)

    async def _resend_pending(self) -> None:
        """The batch an earlier run of the agent had in flight, sent again under its
        own msg id: stored once, whether or not that run's send arrived."""
        if not self._progress.pending:
            return
        batch = events_pb2.LogBatch.FromString(base64.b64decode(self._progress.pending))
        await self._publish_batch(batch, self._batches - 1)
        self._note_progress([], pending=None)

    async def _publish_batch(self, batch: events_pb2.LogBatch, number: int) -> None:
        msg_id = f"logs-{batch.allocation_id}-{batch.agent_id}-{number}"
        delay, stalled_at = RETRY_MIN_S, 0.0
        while True:
            try:
                await self._publish(batch, msg_id)
            except UNREACHABLE as error:  # the lines wait; the trial goes on
                if not stalled_at:
                    stalled_at = time.monotonic()
                    log.warning("log_shipping_stalled", error=repr(error), waiting_lines=len(self._buffer))
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            except Exception as error:  # noqa: BLE001 - a bad batch must not stop the shipping, nor the trial
                log.warning("log_batch_refused", lines=len(batch.lines), error=repr(error))
                return
            if stalled_at:
                log.info(
                    "log_shipping_resumed",
                    stalled_s=round(time.monotonic() - stalled_at, 1),
                    waiting_lines=len(self._buffer),
                )
            return

    def _note_progress(self, lines: list[events_pb2.LogLine], *, pending: events_pb2.LogBatch | None) -> None:
        """Notes (atomically) what was shipped or is in flight (`pending`), for an
        agent that reattaches the container."""
        if self._progress_path is None:
            return
        newest = {"stdout": self._progress.stdout_ns, "stderr": self._progress.stderr_ns}
        for line in lines:
            if line.stdtype in newest:
                newest[line.stdtype] = max(newest[line.stdtype], line.timestamp_ns)
        in_flight = base64.b64encode(pending.SerializeToString()).decode() if pending is not None else ""
        self._progress = ShippedProgress(self._batches, newest["stdout"], newest["stderr"], in_flight)
        staging = self._progress_path.with_name(f".{self._progress_path.name}.tmp")
        try:
            staging.write_text(json.dumps(asdict(self._progress)))
            staging.replace(self._progress_path)
        except OSError as error:
            log.warning("log_progress_not_noted", path=str(self._progress_path), error=str(error))


def log_line(stdtype: str, text: str, timestamp_ns: int) -> events_pb2.LogLine:
    """A line of output, its `[rank=N] ` prefix (if any) turned into its rank."""
    prefix = _RANK_PREFIX.match(text)
    if prefix is None:
        return events_pb2.LogLine(timestamp_ns=timestamp_ns, stdtype=stdtype, log=text)
    rank = int(prefix.group(1))
    return events_pb2.LogLine(timestamp_ns=timestamp_ns, stdtype=stdtype, log=text[prefix.end() :], rank=rank)


def _size(line: events_pb2.LogLine) -> int:
    """Its size in a batch (its encoding, and the field's tag and length)."""
    return int(line.ByteSize()) + _FRAMING


def _dropped_note(count: int, timestamp_ns: int) -> events_pb2.LogLine:
    text = f"determined agent: {count} log lines dropped: the agent's log buffer was full while NATS was unreachable"
    return events_pb2.LogLine(timestamp_ns=timestamp_ns, stdtype="stderr", log=text)


_DROPPED_NOTE_BYTES = _size(_dropped_note(10**12, 0))
