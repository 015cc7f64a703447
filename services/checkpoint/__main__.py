"""The checkpoint service: `python -m services.checkpoint`.

For now it only follows the log of checkpoints (GC comes later), so that a
cluster can already start it and wait for its ready file.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

from services.common.decider import PureCore
from services.common.service import run_core, serve
from services.common.settings import CommonSettings


class CheckpointSettings(CommonSettings):
    pass


def following_core() -> PureCore[None]:
    """Reads checkpoints and decides nothing: the place GC will grow into."""
    return PureCore(("checkpoint_reported",), lambda: None, lambda state, envelope: None, lambda state: [])


async def run(settings: CheckpointSettings) -> None:
    await run_core(settings, following_core(), name="checkpoint")


def main() -> None:
    serve("checkpoint", CheckpointSettings(), run)


if __name__ == "__main__":
    main()
