"""det master logs: the gateway's own recent log lines, kept in memory.

As Determined's master does (its log buffer), the gateway keeps its last
MAX_LINES lines in a ring buffer that a logging handler fills, whatever else
its log goes to (a file of a local cluster, a container's output under
compose): so the command works the same for every way the cluster is run,
and the gateway reads no other process's files. The other services' logs are
their own (`det deploy local logs` reads a local cluster's files).

A follower polls the buffer every POLL_INTERVAL_S: records may be logged from
any thread, and a poll needs no wake-up across threads.
"""

import asyncio
import collections
import itertools
import logging
import threading
from collections.abc import AsyncIterator

from determined.proto import api_pb2
from services.common.logging import line_formatter

MAX_LINES = 10_000
# A longer line is cut (with a note): the buffer holds at most MAX_LINES × this.
MAX_LINE_CHARS = 4096
POLL_INTERVAL_S = 0.5
# At most this many entries per response.
BATCH = 500


class MasterLogBuffer(logging.Handler):
    """The last MAX_LINES lines logged, each a MasterLogEntry numbered from 1."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        super().__init__()
        self.setFormatter(line_formatter(json=False))
        self._entries: collections.deque[api_pb2.MasterLogEntry] = collections.deque(maxlen=max_lines)
        self._ids = itertools.count(1)
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - a record that cannot be formatted is left out, as logging does
            return
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" ... ({len(line) - MAX_LINE_CHARS} more characters)"
        with self._guard:
            self._entries.append(
                api_pb2.MasterLogEntry(
                    id=next(self._ids),
                    timestamp_ns=int(record.created * 1e9),
                    level=record.levelname,
                    message=line,
                )
            )

    def after(self, entry_id: int) -> list[api_pb2.MasterLogEntry]:
        """The entries kept that come after `entry_id`, oldest first."""
        with self._guard:
            if not self._entries or self._entries[-1].id <= entry_id:
                return []
            return [entry for entry in self._entries if entry.id > entry_id]


_installed: MasterLogBuffer | None = None


def installed() -> MasterLogBuffer:
    """The process's buffer, on the root logger (again, when configure_logging
    took the root's handlers away since)."""
    global _installed
    if _installed is None:
        _installed = MasterLogBuffer()
    root = logging.getLogger()
    if _installed not in root.handlers:
        root.addHandler(_installed)
    return _installed


async def master_logs(
    buffer: MasterLogBuffer, request: api_pb2.MasterLogsRequest
) -> AsyncIterator[api_pb2.MasterLogsResponse]:
    """The kept lines (the last `tail`), then with `follow` each new one."""
    entries = buffer.after(0)
    if request.tail > 0:
        entries = entries[-request.tail :]
    last = 0
    while True:
        for start in range(0, len(entries), BATCH):
            yield api_pb2.MasterLogsResponse(entries=entries[start : start + BATCH])
        if entries:
            last = entries[-1].id
        if not request.follow:
            return
        await asyncio.sleep(POLL_INTERVAL_S)
        entries = buffer.after(last)
