"""cancel_and_wait ends a task even when it loses a cancellation (as nats-py's requests can on
Python 3.11: a cancellation that lands as asyncio.wait_for's answer arrives is dropped)."""

import asyncio

import pytest

from services.common import cancelling
from services.common.cancelling import cancel_and_wait


async def test_a_task_that_swallows_one_cancellation_is_cancelled_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cancelling, "RECANCEL_S", 0.05)
    cancellations = 0

    async def follower() -> None:
        nonlocal cancellations
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancellations += 1
                if cancellations == 1:
                    continue  # lost, as in the race
                raise

    task = asyncio.create_task(follower())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), timeout=5)
    assert task.cancelled() and cancellations == 2


async def test_ended_and_failed_tasks_are_waited_for_without_a_warning() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    failed = asyncio.create_task(fails())
    done = asyncio.create_task(asyncio.sleep(0))
    await asyncio.sleep(0.01)
    await cancel_and_wait(failed, done)
    assert isinstance(failed.exception(), ValueError) and done.done()
