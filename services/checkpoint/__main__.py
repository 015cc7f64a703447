"""The checkpoint service: `python -m services.checkpoint`.

For now it only follows the log of checkpoints (GC comes later), so that a
cluster can already start it and wait for its ready file.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

from dataclasses import dataclass, field

from services.common.envelope import Append, Envelope, kinds_of
from services.common.service import run_core, serve
from services.common.settings import CommonSettings


class CheckpointSettings(CommonSettings):
    pass


@dataclass
class FollowingCore:
    """Reads checkpoints and decides nothing: the place GC will grow into."""

    kinds: list[str] = field(default_factory=lambda: kinds_of(("checkpoint_reported",)))

    def initial_state(self) -> None:
        return None

    def evolve(self, state: None, envelope: Envelope) -> None:
        return None

    def decide(self, state: None) -> list[Append]:
        return []


async def run(settings: CheckpointSettings) -> None:
    await run_core(settings, FollowingCore(), name="checkpoint")


def main() -> None:
    serve("checkpoint", CheckpointSettings(), run)


if __name__ == "__main__":
    main()
