"""The checkpoint service: `python -m services.checkpoint`.

For now it only follows the log of checkpoints (GC comes later), so that a
cluster can already start it and wait for its ready file.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

import asyncio
import signal
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from services.common.decider import Shell
from services.common.envelope import Append, Envelope
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.common.settings import CommonSettings

ACTOR = "service:checkpoint"

log = structlog.get_logger()


class CheckpointSettings(CommonSettings):
    ready_file: Path | None = None


@dataclass
class FollowingCore:
    """Reads checkpoints and decides nothing: the place GC will grow into."""

    kinds: list[str] = field(default_factory=lambda: ["checkpoint"])

    def initial_state(self) -> None:
        return None

    def evolve(self, state: None, envelope: Envelope) -> None:
        return None

    def decide(self, state: None) -> list[Append]:
        return []


async def run(settings: CheckpointSettings) -> None:
    store = await EventStore.connect(settings.nats_url, settings.namespace, name="checkpoint")
    shell = Shell(store, FollowingCore(), ACTOR, on_caught_up=lambda: _write_ready(settings.ready_file))
    try:
        await shell.run()
    finally:
        await store.close()


async def _write_ready(path: Path | None) -> None:
    log.info("ready")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("ready\n")


async def _serve(settings: CheckpointSettings) -> None:
    task = asyncio.create_task(run(settings))
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        log.info("stopped")


def main() -> None:
    settings = CheckpointSettings()
    configure_logging(
        "checkpoint", json=settings.log_json, log_file=settings.log_file, level=settings.log_level
    )
    asyncio.run(_serve(settings))


if __name__ == "__main__":
    main()
