"""The scheduler's shell publishing its job queue (services/common/job_queue.py)
for the gateway to show: the Shell's `on_position` hands it each state with
the sequence it covers. The first is written at once, before the scheduler
says it is ready (a gateway asked then finds its queue); then one task
writes the newest it holds, skipping those that came while it wrote (the
board holds the current queue only). Working out the queue takes at most
BUSY_SHARE of the scheduler's time (some 20 ms with 10,000 queued trials on
8,000 slots: it then publishes a few times a second, not after every event)."""

import asyncio
import time

import structlog

from services.common.job_queue import KvJobQueueBoard
from services.scheduler.config import SchedulerConfig
from services.scheduler.queue import published
from services.scheduler.state import SchedulerState

log = structlog.get_logger()

# After a write that failed, the wait before writing the newest state again.
RETRY_S = 1.0
# The most of the scheduler's time that working out the queue takes: after one that took
# t seconds, the next waits t * (1 - BUSY_SHARE) / BUSY_SHARE.
BUSY_SHARE = 0.2


class QueuePublisher:
    def __init__(self, board: KvJobQueueBoard, config: SchedulerConfig, kinds: list[str]) -> None:
        self.board = board
        self.config = config
        self.kinds = kinds
        self._newest: tuple[SchedulerState, int] | None = None
        self._moved = asyncio.Event()

    async def on_position(self, state: SchedulerState, sequence: int) -> None:
        first = self._newest is None
        self._newest = (state, sequence)
        if not first or await self._written() is None:
            self._moved.set()

    async def run(self) -> None:
        """Writes the newest state's queue each time there is a newer one, until cancelled."""
        while True:
            await self._moved.wait()
            self._moved.clear()
            spent = await self._written()
            if spent is None:
                await asyncio.sleep(RETRY_S)
                self._moved.set()
            else:
                await asyncio.sleep(spent * (1 - BUSY_SHARE) / BUSY_SHARE)

    async def _written(self) -> float | None:
        """Writes the newest state's queue; the seconds working it out took,
        None when it could not be written."""
        assert self._newest is not None  # on_position came first
        state, sequence = self._newest
        try:
            started = time.perf_counter()
            queue = published(state, sequence, self.config, self.kinds)
            spent = time.perf_counter() - started
            await self.board.publish(queue)
        except Exception as error:  # noqa: BLE001 - the queue view must never stop the scheduler
            log.warning("job_queue_not_published", sequence=sequence, error=repr(error))
            return None
        return spent
