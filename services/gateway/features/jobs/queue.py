"""The job queue as the scheduler last published it (GetJobs, UpdateJob):
the queue, the positions and the reasons a job waits are the scheduler's
own (services/common/job_queue.py); the gateway runs none of its code.

Read your writes, as from the read models: an answer covers at least every
event the scheduler folds that the log held when asked (the entry's
`sequence` reaches it), or is what the scheduler published CATCH_UP_S later.
Before the scheduler first published (it is not up yet), the queue is empty
and the scheduler's settings are its defaults.
"""

import asyncio

from services.common.eventstore import EventStore
from services.common.job_queue import KvJobQueueBoard, PublishedQueue

# How long an answer waits for the scheduler to publish what the log held when asked.
CATCH_UP_S = 10.0
# How often it looks meanwhile.
POLL_S = 0.02


class JobQueue:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.board = KvJobQueueBoard(store)

    async def published(self) -> PublishedQueue:
        """What the scheduler published last, without waiting."""
        return await self.board.read() or PublishedQueue()

    async def latest(self) -> PublishedQueue:
        """The scheduler's queue, as of at least the log when asked (or CATCH_UP_S later)."""
        queue = await self.published()
        if not queue.kinds:  # none published yet
            return queue
        target = await self.store.last_sequence_of(list(queue.kinds))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATCH_UP_S
        while queue.sequence < target and loop.time() < deadline:
            await asyncio.sleep(POLL_S)
            queue = await self.board.read() or queue
        return queue
