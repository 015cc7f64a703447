"""The searcher: `python -m services.searcher`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

from services.common.service import run_core, serve
from services.common.settings import CommonSettings
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore
from services.searcher.unmanaged import UnmanagedTrialsCore

# With no event for this long, the searcher looks at the clock: a detached run's trial
# whose script went silent ends ERROR (unmanaged.py).
TICK_S = 1.0


class SearcherSettings(CommonSettings):
    pass


async def run(settings: SearcherSettings) -> None:
    """Rebuilds the searcher's state from the log, then decides until
    cancelled: the search methods, and the lifecycle of the trials they create
    (each trial is a task that asks the scheduler for its runs), and of detached runs' trials."""
    cores = (SearcherCore(), TrialLifecycleCore(), UnmanagedTrialsCore())
    await run_core(settings, *cores, name="searcher", tick_s=TICK_S)


def main() -> None:
    serve("searcher", SearcherSettings(), run)


if __name__ == "__main__":
    main()
