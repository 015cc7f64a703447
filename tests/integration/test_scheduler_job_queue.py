"""The scheduler service publishing its job queue against a real nats-server:
nothing before it is up, an empty queue by the time it is ready, and after
each event a queue that covers the log up to it, its own decisions included."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from determined.proto import events_pb2 as ev
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.job_queue import KvJobQueueBoard, PublishedQueue
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler

DEADLINE_S = 20.0


@asynccontextmanager
async def scheduler(nats_url: str, namespace: str, ready_file: Path) -> AsyncIterator[None]:
    settings = SchedulerSettings(nats_url=nats_url, namespace=namespace, ready_file=ready_file)
    task = asyncio.create_task(run_scheduler(settings))
    try:
        while not ready_file.exists():
            assert not task.done(), task
            await asyncio.sleep(0.02)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def covering(store: EventStore, board: KvJobQueueBoard) -> PublishedQueue:
    """The first queue published that covers the log's newest event the scheduler folds."""
    async with asyncio.timeout(DEADLINE_S):
        while True:
            queue = await board.read()
            if queue is not None and queue.sequence >= await store.last_sequence_of(list(queue.kinds)):
                return queue
            await asyncio.sleep(0.02)


async def test_the_queue_covers_the_log_and_the_schedulers_own_decisions(
    event_store: EventStore, nats_url: str, tmp_path: Path
) -> None:
    board = KvJobQueueBoard(event_store)
    assert await board.read() is None  # no scheduler yet: no bucket
    async with scheduler(nats_url, event_store.namespace, tmp_path / "scheduler.ready"):
        empty = await board.read()  # published before the scheduler said it was ready
        assert empty is not None
        assert (empty.sequence, empty.jobs, empty.kinds) == (0, (), ("agent", "allocation", "experiment"))
        slots = [ev.Slot(slot_id=0, type="cpu")]
        agent = ev.AgentRegistered(agent_id="a1", hostname="a1", slots=slots)
        await event_store.append(Append("agent/a1", agent, "agent-a1"), actor="service:agent")
        request = ev.AllocationRequested(
            allocation_id="1.1", task_id="1", slots=1, job_id="experiment/1", weight=1.0
        )
        await event_store.append(Append("allocation/1.1", request, "requested-1.1"), actor="service:searcher")
        queue = await covering(event_store, board)
        # The scheduler's AllocationAssigned is the log's newest event: the queue covers it.
        newest = await event_store.last_event("allocation/1.1")
        assert newest is not None and newest.envelope.WhichOneof("payload") == "allocation_assigned"
        assert queue.sequence == newest.sequence == await event_store.last_sequence()
        [job] = queue.jobs
        assert (job.job_id, job.state, job.slots_acquired, job.position) == (
            "experiment/1",
            "SCHEDULED",
            1,
            1,
        )
