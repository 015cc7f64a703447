"""The metrics shipper: reports leave the caller in microseconds and the gateway in batches.

Callers put validated reports on a bounded queue (a full queue blocks them: backpressure,
never loss). One daemon thread takes what is queued, serializes it to JSON and sends it
as one batch of at most MAX_BATCH_REPORTS reports / about MAX_BATCH_BYTES of JSON, well
under NATS's 8 MB limit. Batches are numbered 1, 2, ... per process (`batch_seq`, with a
random id of the process); the send function retries a batch unchanged while the gateway
is unreachable, and the gateway stores each (trial run, process, batch_seq) once, so a restart neither loses nor repeats reports.
Any other failure stops the shipper and is raised on the next report, flush or close.
"""

import atexit
import itertools
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from determined._client import MetricRecord

logger = logging.getLogger("determined.core")

MAX_QUEUED_REPORTS = 10_000
MAX_BATCH_REPORTS = 1000
MAX_BATCH_BYTES = 256 * 1024

# Per process, not per shipper: two contexts in one trial run must not reuse a number,
# or the gateway would drop the second one's batches as duplicates.
_batch_seqs = itertools.count(1)

SendBatch = Callable[[int, list[MetricRecord]], None]


class Report(NamedTuple):
    group: str
    steps_completed: int
    metrics: dict[str, Any]
    reported_at_ns: int


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


class _Stop(_Flush):
    pass


class MetricsShipper:
    def __init__(self, send: SendBatch, *, max_queued: int = MAX_QUEUED_REPORTS) -> None:
        self._send = send
        self._queue: queue.Queue[Report | _Flush] = queue.Queue(max_queued)
        self._thread = threading.Thread(target=self._run, name="determined-metrics", daemon=True)
        self._error: BaseException | None = None
        self._error_raised = False

    def start(self) -> None:
        self._thread.start()
        atexit.register(self._flush_at_exit)

    def put(self, report: Report) -> None:
        """Queue one report; blocks while the queue is full."""
        if self._error is not None:
            self._error_raised = True
            raise self._error
        if not self._thread.is_alive():
            raise RuntimeError(
                "the metrics shipper is not running: use `with det.core.init() as core_context:`"
            )
        self._queue.put(report)

    def flush(self) -> None:
        """Return once every report queued so far was sent; raise the shipper's error if any."""
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
        self._queue.put(marker)
        while not marker.done.wait(1.0):
            if not self._thread.is_alive():
                return

    def _raise_error(self) -> None:
        if self._error is not None and not self._error_raised:
            self._error_raised = True
            raise self._error

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
            try:
                item = self._queue.get() if not batch else self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Flush):
                return batch, item, None
            record = _serialize(item)
            if batch and size + len(record.metrics_json) > MAX_BATCH_BYTES:
                return batch, None, record
            batch.append(record)
            size += len(record.metrics_json)
        return batch, None, None

    def _ship(self, batch: list[MetricRecord]) -> None:
        if self._error is not None:
            return  # stopped by an earlier failure: drain without sending
        try:
            self._send(next(_batch_seqs), batch)
        except BaseException as error:  # noqa: BLE001 - handed to the user's thread
            logger.error("sending metrics failed: %s", error)
            self._error = error


def _serialize(report: Report) -> MetricRecord:
    return MetricRecord(
        group=report.group,
        steps_completed=report.steps_completed,
        metrics_json=json.dumps(report.metrics, separators=(",", ":")),
        reported_at_ns=report.reported_at_ns,
    )
