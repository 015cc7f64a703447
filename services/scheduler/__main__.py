"""The scheduler: `python -m services.scheduler`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

from services.common.service import run_core, serve
from services.common.settings import CommonSettings
from services.scheduler.core import SchedulerCore


class SchedulerSettings(CommonSettings):
    pass


async def run(settings: SchedulerSettings) -> None:
    """Rebuilds the scheduler's state from the log, then decides until cancelled."""
    await run_core(settings, SchedulerCore(), name="scheduler")


def main() -> None:
    serve("scheduler", SchedulerSettings(), run)


if __name__ == "__main__":
    main()
