"""The decider shell, on both event logs (a real nats-server's and the
in-memory one): every decision names the event it answers."""

import asyncio

from support.toy_cores import two_trials_core

from determined.proto import events_pb2
from services.common.decider import Shell
from services.common.envelope import Append
from services.common.eventlog import EventLog


async def test_every_decision_of_one_settle_answers_the_event_folded(event_log: EventLog) -> None:
    core = two_trials_core()
    ready = asyncio.Event()

    async def caught_up() -> None:
        ready.set()

    shell = asyncio.create_task(Shell(event_log, core, "service:test", on_caught_up=caught_up).run())
    await ready.wait()  # following the log: what it folds next, it answers
    try:
        created = Append("experiment/1", events_pb2.ExperimentCreated(experiment_id=1), "create-1")
        await event_log.append(created, actor="user:test")
        for _ in range(100):
            trials = [s.envelope async for s in event_log.read(["trial"], follow=False)]
            if len(trials) == 2:
                break
            await asyncio.sleep(0.05)
    finally:
        shell.cancel()
        await asyncio.gather(shell, return_exceptions=True)
    assert [(t.event_id, t.causation_id, t.correlation_id) for t in trials] == [
        ("t-1-1", "create-1", "create-1"),
        ("t-1-2", "create-1", "create-1"),
    ]
