"""The Shell's `on_position` (on the in-memory event log): the state and the
sequence it covers, once before the shell says it is ready, then after every
event it reads, its own decisions included (the scheduler publishes its job
queue there)."""

import asyncio

from support.toy_cores import two_trials_core

from determined.proto import events_pb2
from services.common.decider import Shell
from services.common.envelope import Append
from services.common.memory_log import MemoryEventLog


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.moved = asyncio.Event()

    async def on_position(self, state: set[int], sequence: int) -> None:
        self.calls.append(("position", sequence))
        self.moved.set()

    async def on_caught_up(self) -> None:
        self.calls.append(("ready", 0))

    async def until(self, sequence: int) -> None:
        async with asyncio.timeout(10):
            while ("position", sequence) not in self.calls:
                self.moved.clear()
                await self.moved.wait()


def created(experiment_id: int) -> Append:
    return Append(
        f"experiment/{experiment_id}",
        events_pb2.ExperimentCreated(experiment_id=experiment_id),
        f"create-{experiment_id}",
    )


async def shell_positions(log: MemoryEventLog, *then: Append, last: int) -> list[tuple[str, int]]:
    """What the shell reports, from its start until it covered `last`, with `then` appended once ready."""
    recorder = Recorder()
    shell = Shell(
        log,
        two_trials_core(),
        "service:test",
        on_caught_up=recorder.on_caught_up,
        on_position=recorder.on_position,
    )
    task = asyncio.create_task(shell.run())
    try:
        while ("ready", 0) not in recorder.calls:
            await asyncio.sleep(0)
        for append in then:
            await log.append(append, actor="user:test")
        await recorder.until(last)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return recorder.calls


async def test_an_empty_log_is_covered_up_to_zero_before_the_shell_is_ready() -> None:
    calls = await shell_positions(MemoryEventLog(), created(1), last=3)
    assert calls == [("position", 0), ("ready", 0), ("position", 1), ("position", 2), ("position", 3)]


async def test_a_replay_reports_once_caught_up_and_then_its_own_decisions() -> None:
    log = MemoryEventLog()
    await log.append(created(1), actor="user:test")
    calls = await shell_positions(log, created(2), last=6)
    # 1 read, its two trials (2, 3) decided and read back; then 4 and its trials (5, 6).
    assert calls == [("position", 1), ("ready", 0), *(("position", n) for n in range(2, 7))]
