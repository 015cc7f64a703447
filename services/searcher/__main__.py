"""The searcher: `python -m services.searcher`.

Settings (env): DET_NATS_URL, DET_NAMESPACE, DET_READY_FILE, DET_LOG_*.
"""

from services.common.service import run_core, serve
from services.common.settings import CommonSettings
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore


class SearcherSettings(CommonSettings):
    pass


async def run(settings: SearcherSettings) -> None:
    """Rebuilds the searcher's state from the log, then decides until
    cancelled: the search methods, and the lifecycle of the trials they create
    (each trial is a task that asks the scheduler for its runs)."""
    await run_core(settings, SearcherCore(), TrialLifecycleCore(), name="searcher")


def main() -> None:
    serve("searcher", SearcherSettings(), run)


if __name__ == "__main__":
    main()
