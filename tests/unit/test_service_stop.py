"""A signalled service stops even when its first cancellation is lost.

On Python 3.11 `asyncio.wait_for` (nats-py's requests use it) drops a
cancellation that lands as its inner future completes; under load that left a
service running after SIGTERM (the agent, once, in
test_services_flow_processes)."""

import asyncio
import contextlib

import pytest

from services.common import service


async def swallows_the_first_cancel(cleaned_up: list[str]) -> None:
    """A run whose first cancellation is lost, as in wait_for's race, then waits on."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    try:
        await asyncio.Event().wait()
    finally:
        cleaned_up.append("done")


async def test_a_lost_cancellation_is_sent_again_until_the_run_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "RECANCEL_S", 0.01)
    cleaned_up: list[str] = []
    run = asyncio.ensure_future(swallows_the_first_cancel(cleaned_up))
    signalled = asyncio.Event()
    watcher = asyncio.create_task(service._cancel_when_signalled(run, signalled))
    await asyncio.sleep(0.05)
    assert not run.done()
    signalled.set()
    await asyncio.wait_for(watcher, 5)
    assert run.cancelled() and cleaned_up == ["done"]


async def test_a_run_that_ends_on_its_own_is_not_cancelled() -> None:
    run = asyncio.ensure_future(asyncio.sleep(0))
    signalled = asyncio.Event()
    watcher = asyncio.create_task(service._cancel_when_signalled(run, signalled))
    await run
    watcher.cancel()
    assert not run.cancelled()
