"""The metrics sender: reports leave the caller in microseconds and the gateway in batches.

The report call checks and serializes its metrics (`_validate`: a report over
MAX_REPORT_BYTES, or with a value that has no JSON form, is refused there) and puts the
record in a bounded buffer (MAX_QUEUED_REPORTS records, MAX_QUEUED_BYTES of JSON; a full
buffer blocks the caller: backpressure, never loss). One daemon thread sends what is
buffered, in order, as batches of at most MAX_BATCH_REPORTS reports / about MAX_BATCH_BYTES
of JSON.

Batches are numbered 1, 2, ... per process (`batch_seq`, with a random id of the process);
the send function retries a batch unchanged while the gateway is unavailable (a restart, or
nats-server or PostgreSQL down) for up to its retry window, and the gateway stores each
(trial run, process, batch_seq) once, so an outage neither loses nor repeats reports;
training goes on meanwhile until the buffer is full.

A batch the gateway refuses for its content (`BatchRefusedError`: too large for the event
log, say) stored nothing; it is split in halves, recursively, so that the good reports land.
Each part is sent under its own deterministic id (`part_reporter`), so a part retried after
a gateway restart is stored once too. A single report still refused is dropped: logged at
once, and raised (ReportError) from the next report, flush or close. Any other failure
(the allocation is closed, the retry window ran out) stops the sender and is raised on the
next report, flush or close.
"""

import atexit
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable

from determined._client import BatchRefusedError, MetricRecord
from determined.core._errors import ReportError

logger = logging.getLogger("determined.core")

MAX_QUEUED_REPORTS = 10_000
MAX_QUEUED_BYTES = 64 * 1024 * 1024
MAX_BATCH_REPORTS = 1000
MAX_BATCH_BYTES = 256 * 1024

# Per process, not per sender: two contexts in one trial run must not reuse a number,
# or the gateway would drop the second one's batches as duplicates.
_batch_seqs = itertools.count(1)

# (batch_seq, part, records): part is "" for a whole batch, else its path of halves.
SendBatch = Callable[[int, str, list[MetricRecord]], None]


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


class _Stop(_Flush):
    pass


class _Buffer:
    """A FIFO of records and markers, bounded by count and by bytes of JSON. A record is
    admitted into an empty buffer whatever its size, so no record waits forever."""

    def __init__(self, max_records: int, max_bytes: int) -> None:
        self._items: deque[MetricRecord | _Flush] = deque()
        self._bytes = 0
        self._max_records = max_records
        self._max_bytes = max_bytes
        self._changed = threading.Condition()

    def put(self, item: MetricRecord | _Flush) -> None:
        size = _size(item)
        with self._changed:
            self._changed.wait_for(lambda: not self._items or not self._full(size))
            self._items.append(item)
            self._bytes += size
            self._changed.notify_all()

    def get(self, block: bool) -> MetricRecord | _Flush | None:
        """The oldest item; None when `block` is false and there is none."""
        with self._changed:
            if block:
                self._changed.wait_for(lambda: bool(self._items))
            if not self._items:
                return None
            item = self._items.popleft()
            self._bytes -= _size(item)
            self._changed.notify_all()
            return item

    def _full(self, size: int) -> bool:
        return len(self._items) >= self._max_records or self._bytes + size > self._max_bytes


def _size(item: MetricRecord | _Flush) -> int:
    return len(item.metrics_json) if isinstance(item, MetricRecord) else 0


class MetricsShipper:
    def __init__(
        self,
        send: SendBatch,
        *,
        max_queued: int = MAX_QUEUED_REPORTS,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self._send = send
        self._buffer = _Buffer(max_queued, max_queued_bytes)
        self._thread = threading.Thread(target=self._run, name="determined-metrics", daemon=True)
        self._error: BaseException | None = None
        self._error_raised = False
        self._dropped: list[ReportError] = []
        self._dropped_lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()
        atexit.register(self._flush_at_exit)

    def put(self, record: MetricRecord) -> None:
        """Queue one serialized report; blocks while the buffer is full. Raises the sender's
        error, or (after queueing `record`) a report dropped since the last call."""
        if self._error is not None:
            self._error_raised = True
            raise self._error
        if not self._thread.is_alive():
            raise RuntimeError(
                "the metrics shipper is not running: use `with det.core.init() as core_context:`"
            )
        self._buffer.put(record)
        self._raise_dropped()

    def flush(self) -> None:
        """Return once every report queued so far was sent; raise the sender's error if any."""
        self._wait_for(_Flush())
        self._raise_error()

    def close(self) -> None:
        """Flush, then stop the thread. Safe to call twice."""
        atexit.unregister(self._flush_at_exit)
        self._wait_for(_Stop())
        if self._thread.ident is not None:
            self._thread.join()
        self._raise_error()

    def _wait_for(self, marker: _Flush) -> None:
        if not self._thread.is_alive():
            return
        self._buffer.put(marker)
        while not marker.done.wait(1.0):
            if not self._thread.is_alive():
                return

    def _raise_error(self) -> None:
        if self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error
        self._raise_dropped()

    def _raise_dropped(self) -> None:
        """Raise (once) the first report dropped since the last call; the others are in the log."""
        with self._dropped_lock:
            dropped, self._dropped = self._dropped, []
        if dropped:
            more = f" ({len(dropped) - 1} more dropped; see the log)" if len(dropped) > 1 else ""
            raise ReportError(f"{dropped[0]}{more}")

    def _flush_at_exit(self) -> None:
        try:
            self.flush()
        except Exception:
            logger.exception("could not send the last metrics reports")

    def _run(self) -> None:
        carry: MetricRecord | None = None
        while True:
            batch, marker, carry = self._collect(carry)
            if batch:
                self._ship(batch)
            if marker is not None:
                marker.done.set()
                if isinstance(marker, _Stop):
                    return

    def _collect(
        self, carry: MetricRecord | None
    ) -> tuple[list[MetricRecord], _Flush | None, MetricRecord | None]:
        """The next batch, the marker that ended it (if one did) and a record left over."""
        batch = [carry] if carry is not None else []
        size = len(carry.metrics_json) if carry is not None else 0
        while len(batch) < MAX_BATCH_REPORTS:
            item = self._buffer.get(block=not batch)
            if item is None:
                break
            if isinstance(item, _Flush):
                return batch, item, None
            if batch and size + len(item.metrics_json) > MAX_BATCH_BYTES:
                return batch, None, item
            batch.append(item)
            size += len(item.metrics_json)
        return batch, None, None

    def _ship(self, batch: list[MetricRecord]) -> None:
        if self._error is not None:
            return  # stopped by an earlier failure: drain without sending
        try:
            self._deliver(next(_batch_seqs), "", batch)
        except BaseException as error:  # noqa: BLE001 - handed to the user's thread
            logger.error("sending metrics failed: %s", error)
            self._error = error

    def _deliver(self, batch_seq: int, part: str, records: list[MetricRecord]) -> None:
        """Send `records`; if the gateway refuses them, their halves, down to single reports."""
        try:
            self._send(batch_seq, part, records)
        except BatchRefusedError as refusal:
            if len(records) > 1:
                half = len(records) // 2
                self._deliver(batch_seq, f"{part}0", records[:half])
                self._deliver(batch_seq, f"{part}1", records[half:])
                return
            self._drop(records[0], str(refusal))

    def _drop(self, record: MetricRecord, reason: str) -> None:
        error = ReportError(
            f"the {record.group} report at steps_completed={record.steps_completed} "
            f"({len(record.metrics_json)} bytes of JSON) was refused by the cluster and dropped: {reason}"
        )
        logger.error("%s", error)
        with self._dropped_lock:
            self._dropped.append(error)
