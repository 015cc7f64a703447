"""The job queue the scheduler publishes for the gateway
(services/common/job_queue.py, services/scheduler/publishing.py): its
versioned JSON shape, what the scheduler puts in it, and the publisher that
writes the newest state's queue, skipping those that came meanwhile (on the
in-memory event log)."""

import asyncio

import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, aggregate, wrap
from services.common.job_queue import KvJobQueueBoard, PublishedQueue, decoded, encoded
from services.common.memory_log import MemoryEventLog
from services.scheduler import publishing
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore, SchedulerState
from services.scheduler.publishing import QueuePublisher
from services.scheduler.queue import published

CONFIG = SchedulerConfig(pool_types={"gpu": "priority"}, default_priority=7)
CORE = SchedulerCore(CONFIG)


def folded(*payloads: ev.AgentRegistered | ev.AllocationRequested) -> SchedulerState:
    state = CORE.initial_state()
    for number, payload in enumerate(payloads):
        if isinstance(payload, ev.AgentRegistered):
            name = aggregate("agent", payload.agent_id)
        else:
            name = aggregate("allocation", payload.allocation_id)
        envelope = wrap(Append(name, payload, f"e-{number}"), actor="test", occurred_at_ns=number)
        state = CORE.evolve(state, envelope)
    return state


def requested(allocation_id: str, experiment_id: int, slots: int) -> ev.AllocationRequested:
    return ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=allocation_id.partition(".")[0],
        slots=slots,
        job_id=f"experiment/{experiment_id}",
        weight=1.0,
    )


AGENT = ev.AgentRegistered(agent_id="a1", hostname="a1", slots=[ev.Slot(slot_id=0, type="cpu")])
QUEUED = folded(AGENT, requested("1.1", 1, 2))


def test_the_published_queue_is_the_schedulers_view_with_its_settings() -> None:
    queue = published(QUEUED, 12, CONFIG, CORE.kinds)
    assert (queue.sequence, queue.kinds, queue.default_priority) == (12, tuple(CORE.kinds), 7)
    assert (queue.scheduler_of("gpu"), queue.scheduler_of("default")) == ("priority", "fair_share")
    [job] = queue.jobs
    assert (job.job_id, job.state, job.priority, job.slots_needed, job.position) == (
        "experiment/1",
        "QUEUED",
        7,
        2,
        1,
    )
    assert job.waiting_reason == "needs 2 slots; pool 'default' has 1"


def test_the_shape_reads_back_and_another_version_reads_as_none() -> None:
    queue = published(QUEUED, 12, CONFIG, CORE.kinds)
    assert decoded(encoded(queue)) == queue
    assert decoded(encoded(PublishedQueue())) == PublishedQueue()
    assert decoded(encoded(queue).replace(b'"version":1', b'"version":2')) is None
    for unreadable in (b"", b"[]", b'{"version":1}', b'{"version":1,"jobs":[{"job_id":"x"}]}'):
        assert decoded(unreadable) is None, unreadable


@pytest.fixture
def board() -> KvJobQueueBoard:
    return KvJobQueueBoard(MemoryEventLog())


async def until_published(board: KvJobQueueBoard, sequence: int) -> PublishedQueue:
    while (queue := await board.read()) is None or queue.sequence < sequence:
        await asyncio.sleep(0.001)
    return queue


async def test_nothing_is_read_before_the_first_queue_and_a_queue_too_large_is_not_written() -> None:
    board = KvJobQueueBoard(MemoryEventLog(max_value_bytes=500))
    assert await board.read() is None
    small = PublishedQueue(sequence=1)
    await board.publish(small)
    await board.publish(
        published(folded(AGENT, *(requested(f"{i}.1", i, 2) for i in range(9))), 2, CONFIG, [])
    )
    assert await board.read() == small


async def test_the_first_state_is_written_at_once_then_the_newest_only(board: KvJobQueueBoard) -> None:
    publisher = QueuePublisher(board, CONFIG, CORE.kinds)
    await publisher.on_position(CORE.initial_state(), 1)
    first = await board.read()  # written before the scheduler says it is ready
    assert first is not None and (first.sequence, first.jobs) == (1, ())
    writes: list[int] = []
    original = board.publish

    async def recorded(queue: PublishedQueue) -> None:
        writes.append(queue.sequence)
        await original(queue)

    board.publish = recorded  # type: ignore[method-assign]
    await publisher.on_position(CORE.initial_state(), 2)
    await publisher.on_position(QUEUED, 3)  # before the writer ran: the one before is skipped
    task = asyncio.create_task(publisher.run())
    try:
        queue = await asyncio.wait_for(until_published(board, 3), 10)
        assert [job.job_id for job in queue.jobs] == ["experiment/1"]
        await publisher.on_position(CORE.initial_state(), 4)
        assert not (await asyncio.wait_for(until_published(board, 4), 10)).jobs
        assert writes == [3, 4]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_failed_write_is_made_again(board: KvJobQueueBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publishing, "RETRY_S", 0.0)
    failures = [ConnectionError("nats-server went away")]
    original = board.publish

    async def failing_once(queue: PublishedQueue) -> None:
        if failures:
            raise failures.pop()
        await original(queue)

    board.publish = failing_once  # type: ignore[method-assign]
    publisher = QueuePublisher(board, CONFIG, CORE.kinds)
    task = asyncio.create_task(publisher.run())
    try:
        await publisher.on_position(QUEUED, 5)
        queue = await asyncio.wait_for(until_published(board, 5), 10)
        assert not failures and [job.job_id for job in queue.jobs] == ["experiment/1"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
