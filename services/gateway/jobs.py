"""The job queue as the scheduler sees it (GetJobs): a read-only follower in
the gateway process that folds the scheduler's core over the log, so the
queue, the positions and the reasons a job waits are the scheduler's own.

It starts from the scheduler's newest snapshot when one of this code exists
(services/common/snapshots.py; read only: it never writes one), then follows
the scheduler's kinds of events. It never decides and never appends. It
starts on the first GetJobs, so a gateway nobody asks pays nothing for it.
"""

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import structlog

from services.common.envelope import subject_for
from services.common.eventstore import EventStore
from services.common.snapshots import Snapshots
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore

if TYPE_CHECKING:
    from services.scheduler.queue import JobView

log = structlog.get_logger()

# How long GetJobs waits for the follower to reach what the log held when it
# was asked, before answering with what it has.
CATCH_UP_S = 10.0


class JobQueue:
    def __init__(self, store: EventStore, config: SchedulerConfig) -> None:
        self.store = store
        self.config = config
        self.core = SchedulerCore(config)
        self.state: Any = self.core.initial_state()
        self.position = 0
        self._moved = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def jobs(self) -> "list[JobView]":
        """The queue, every pool's, in each pool's order, as of at least the log
        when asked (or CATCH_UP_S later, whichever comes first)."""
        from services.scheduler.queue import job_queue

        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._follow(), name="job-queue")
        target = await self.store.last_sequence_of(self.core.kinds)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CATCH_UP_S):
                while self.position < target:
                    if self._task.done():
                        self._task.result()  # the follower failed: the caller is told why
                    self._moved.clear()
                    await self._moved.wait()
        # As the scheduler's own clock ticks do: how long things ran counts in the reasons.
        return job_queue(self.core.tick(self.state, time.time_ns()), self.config)

    async def _follow(self) -> None:
        snapshot = await Snapshots(self.store, "scheduler").load(type(self.core).__name__)
        if snapshot is not None and snapshot.sequence > self.position:
            self.state, self.position = snapshot.state, snapshot.sequence
            log.info("job_queue_snapshot_restored", sequence=snapshot.sequence)
        self._moved.set()
        async for stored in self.store.read(self.core.kinds, start_sequence=self.position + 1, follow=True):
            try:
                self.state = self.core.evolve(self.state, stored.envelope)
            except Exception as error:  # noqa: BLE001 - skipped as the scheduler's shell skips it
                subject = subject_for(self.store.namespace, stored.envelope.aggregate)
                reason = f"cannot fold it: {error!r}"
                self.store.skips.record(stored.sequence, subject, reason, reader="job queue")
            self.position = stored.sequence
            self._moved.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
