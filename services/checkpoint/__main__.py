"""The checkpoint service: `python -m services.checkpoint`.

Garbage-collects checkpoints as Determined does (services/checkpoint/core.py
decides what to delete and when; deleter.py deletes the files and records
each checkpoint's outcome), and answers `det experiment delete`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*, and
- DET_CHECKPOINT_GC_WORKERS (8): checkpoints deleted at once (each in a thread).
"""

from typing import Annotated

from pydantic import Field

from services.checkpoint.core import GcCore
from services.checkpoint.deleter import Deleter
from services.common.service import connect_part, run_shells, serve
from services.common.settings import CommonSettings

NAME = "checkpoint"


class CheckpointSettings(CommonSettings):
    checkpoint_gc_workers: Annotated[int, Field(ge=1, le=256)] = 8


async def run(settings: CheckpointSettings) -> None:
    store = await connect_part(settings, NAME)
    deleter = Deleter(store, f"service:{NAME}", workers=settings.checkpoint_gc_workers)
    try:
        await run_shells(store, settings, GcCore(), name=NAME, on_state=deleter.on_state)
    finally:
        await deleter.stop()
        await store.close()


def main() -> None:
    serve(NAME, CheckpointSettings(), run)


if __name__ == "__main__":
    main()
