"""Ending a background task for sure."""

import asyncio
from typing import Any

# How long a cancelled task may run on before it is cancelled again.
RECANCEL_S = 1.0


async def cancel_and_wait(*tasks: "asyncio.Future[Any]") -> None:
    """Cancels `tasks` and returns once every one has ended, whatever each raised.

    A task is cancelled again every RECANCEL_S while it runs on: on Python 3.11 a cancellation
    that lands just as nats-py's request (an `asyncio.wait_for`) gets its answer is lost, and the
    task goes on to its next await. A log follower whose reader lost its cancellation that way
    never ended its stream (`det experiment create -f` waited for ever on a finished trial)."""
    running = {task for task in tasks if not task.done()}
    while running:
        for task in running:
            task.cancel()
        _, pending = await asyncio.wait(running, timeout=RECANCEL_S)
        running = set(pending)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: asyncio would log it as never retrieved
