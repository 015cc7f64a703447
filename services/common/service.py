"""What every decider service's `__main__` does around its core: connect,
replay and follow the log through the Shell, write the ready file once caught
up, and stop cleanly on SIGTERM or SIGINT."""

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from services.common.decider import Core, Shell
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.common.settings import CommonSettings
from services.common.snapshots import Snapshots

S = TypeVar("S", bound=CommonSettings)

log = structlog.get_logger()


async def write_ready(path: Path | None) -> None:
    """Says the service is ready: in its log, and in DET_READY_FILE when set."""
    log.info("ready")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("ready\n")


async def run_core(settings: CommonSettings, *cores: Core[Any], name: str) -> None:
    """Connects as `name` and runs the cores' shells (`run_shells`) until cancelled."""
    store = await EventStore.connect(settings.nats_url, settings.namespace, name=name)
    try:
        await run_shells(store, settings, *cores, name=name)
    finally:
        await store.close()


async def run_shells(
    store: EventStore,
    settings: CommonSettings,
    *cores: Core[Any],
    name: str,
    tick_s: float | None = None,
    on_state: Callable[[Any], Awaitable[list[Append]]] | None = None,
) -> None:
    """Rebuilds each core's state from the log, then decides until cancelled;
    appends as `service:<name>`. Each core has its own Shell (its own reading
    of the log); the service is ready once every one has caught up. `tick_s`
    and `on_state` are each Shell's (see Shell)."""
    waiting = len(cores)

    async def caught_up() -> None:
        nonlocal waiting
        waiting -= 1
        if waiting == 0:
            await write_ready(settings.ready_file)

    snapshots = Snapshots(store, name)
    shells = [
        Shell(
            store,
            core,
            f"service:{name}",
            on_state=on_state,
            on_caught_up=caught_up,
            snapshots=snapshots,
            tick_s=tick_s,
        )
        for core in cores
    ]
    await asyncio.gather(*(shell.run() for shell in shells))


def serve(name: str, settings: S, run: Callable[[S], Awaitable[None]]) -> None:
    """Configures logging and runs `run(settings)` until SIGTERM/SIGINT cancels it."""
    configure_logging(
        name,
        json=settings.log_json,
        log_file=settings.log_file,
        level=settings.log_level,
        max_bytes=settings.log_max_bytes,
        backups=settings.log_backups,
    )
    asyncio.run(_until_signalled(run(settings)))


async def _until_signalled(run: Awaitable[None]) -> None:
    task = asyncio.ensure_future(run)
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")
