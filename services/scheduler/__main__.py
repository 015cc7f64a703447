"""The scheduler: `python -m services.scheduler`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

import asyncio
import signal
from pathlib import Path

import structlog

from services.common.decider import Shell
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.common.settings import CommonSettings
from services.scheduler.core import SchedulerCore

ACTOR = "service:scheduler"

log = structlog.get_logger()


class SchedulerSettings(CommonSettings):
    ready_file: Path | None = None


async def run(settings: SchedulerSettings) -> None:
    """Rebuilds the scheduler's state from the log, then decides until cancelled."""
    store = await EventStore.connect(settings.nats_url, settings.namespace, name="scheduler")
    shell = Shell(store, SchedulerCore(), ACTOR, on_caught_up=lambda: _write_ready(settings.ready_file))
    try:
        await shell.run()
    finally:
        await store.close()


async def _write_ready(path: Path | None) -> None:
    log.info("ready")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("ready\n")


async def _serve(settings: SchedulerSettings) -> None:
    task = asyncio.create_task(run(settings))
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")


def main() -> None:
    settings = SchedulerSettings()
    configure_logging(
        "scheduler", json=settings.log_json, log_file=settings.log_file, level=settings.log_level
    )
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
