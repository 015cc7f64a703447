"""What every decider service's `__main__` does around its core: connect,
replay and follow the log through the Shell, write the ready file once caught
up, and stop cleanly on SIGTERM or SIGINT.

A part connects with `connect_part`: its store appends only the event types
the part owns, and records the events it skips in its report file (beside its
ready file: skips.py), which `det deploy local status` shows."""

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from services.common.decider import Core, Shell
from services.common.envelope import Append
from services.common.eventlog import EventLog
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.common.ownership import APPENDS
from services.common.settings import CommonSettings
from services.common.skips import Skips, report_path_of
from services.common.snapshots import Snapshots

S = TypeVar("S", bound=CommonSettings)

log = structlog.get_logger()

# How often a signalled service is cancelled again while it has not stopped.
RECANCEL_S = 5.0


async def write_ready(path: Path | None) -> None:
    """Says the service is ready: in its log, and in DET_READY_FILE when set."""
    log.info("ready")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("ready\n")


def appended_types(part: str) -> frozenset[str] | None:
    """The event types a part appends (APPENDS, from docs/CONTRACTS.md); None
    for a part that appends for users and trials (the gateway), whose appends
    are checked for well-formedness only."""
    types = APPENDS.get(part)
    return None if types is None else frozenset(types)


async def connect_part(settings: CommonSettings, name: str, part: str | None = None) -> EventStore:
    """The part's store, connected as `name`: it appends only the event types
    of `part` (default: `name`), and keeps its record of skipped events in the
    report file beside DET_READY_FILE (none when that is unset)."""
    store = await EventStore.connect(
        settings.nats_url, settings.namespace, name=name, appends=appended_types(part or name)
    )
    store.skips = Skips(report_path_of(settings.ready_file))
    return store


async def run_core(
    settings: CommonSettings, *cores: Core[Any], name: str, tick_s: float | None = None
) -> None:
    """Connects as `name` and runs the cores' shells (`run_shells`) until cancelled."""
    store = await connect_part(settings, name)
    try:
        await run_shells(store, settings, *cores, name=name, tick_s=tick_s)
    finally:
        await store.close()


async def run_shells(
    store: EventLog,
    settings: CommonSettings,
    *cores: Core[Any],
    name: str,
    tick_s: float | None = None,
    on_state: Callable[[Any], Awaitable[list[Append]]] | None = None,
    on_position: Callable[[Any, int], Awaitable[None]] | None = None,
) -> None:
    """Rebuilds each core's state from the log, then decides until cancelled;
    appends as `service:<name>`. Each core has its own Shell (its own reading
    of the log); the service is ready once every one has caught up. `tick_s`,
    `on_state` and `on_position` are each Shell's (see Shell)."""
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
            on_position=on_position,
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
    """Runs `run` until SIGTERM or SIGINT, then cancels it, again every
    RECANCEL_S while it runs: on Python 3.11 `asyncio.wait_for` (nats-py's
    requests use it) drops a cancellation that lands as its inner future
    completes, and under load that left a signalled service running."""
    task = asyncio.ensure_future(run)
    signalled = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, signalled.set)
    watcher = asyncio.create_task(_cancel_when_signalled(task, signalled))
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")
    finally:
        watcher.cancel()


async def _cancel_when_signalled(task: asyncio.Future[None], signalled: asyncio.Event) -> None:
    await signalled.wait()
    log.info("stopping")
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
