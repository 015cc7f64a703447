"""`core_context.searcher`: deprecated in Determined 0.38, kept so that
scripts written for older releases run unchanged.

As in 0.38, it only exists when the config has `searcher.max_length`: then
`operations()` yields exactly one operation of that length and never asks the
master for more; training length otherwise belongs in user code, and the
searcher stops trials itself from the validation metrics it receives. Without
`max_length` every use says so.

The exception is ASHA (`adaptive_asha`, `async_halving`) configured the seed-era
way, with `max_length`: as in the releases those configs were written for, it
yields one operation per rung (`RungSearcherContext`).
"""

import enum
import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from determined._client import AllocationState
from determined.core._distributed import DistributedContext
from determined.core._preempt import PreemptionWatcher

logger = logging.getLogger("determined.core")

ASHA_SEARCHERS = ("adaptive_asha", "async_halving")
# How long the searcher may take to decide on a rung before the wait is logged (and again).
DECISION_LOG_S = 30.0

T = TypeVar("T")

_DEPRECATED = (
    "core_context.searcher is deprecated and only available when the experiment config sets "
    "searcher.max_length: decide the training length in your own code (for example from "
    "hyperparameters) and report validation metrics with core_context.train.report_validation_metrics()"
)


class Unit(enum.Enum):
    EPOCHS = "EPOCHS"
    RECORDS = "RECORDS"
    BATCHES = "BATCHES"


class SearcherMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHEIF_ONLY"  # sic: Determined's value


class SearcherOperation:
    """Train until `length` (in the configured unit), then report completion."""

    def __init__(
        self,
        length: int,
        report_progress: Callable[[float], None],
        is_chief: bool,
        total_length: int | None = None,
    ) -> None:
        self._length = length
        self._total_length = total_length or length
        self._report_progress = report_progress
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        """Progress as a length trained so far; sent as a fraction of the trial's whole
        length (the operation's own, or searcher.max_length when the trial trains by rungs)."""
        self._check_chief("report_progress")
        total = self._total_length
        self._report_progress(min(max(length / total, 0.0), 1.0) if total else 1.0)

    def report_completed(self, searcher_metric: Any) -> None:
        """Marks the operation done (the metric itself reaches the searcher
        through report_validation_metrics, as in Determined 0.38)."""
        self._check_chief("report_completed")
        if self._completed:
            raise RuntimeError("report_completed() was already called for this operation")
        self._completed = True
        logger.debug("searcher operation completed with metric %s", searcher_metric)

    def _check_chief(self, method: str) -> None:
        if not self._is_chief:
            raise RuntimeError(f"only the chief may call SearcherOperation.{method}()")


class SearcherContext:
    def __init__(
        self,
        max_length: int | dict[str, int] | None = None,
        report_progress: Callable[[float], None] | None = None,
        is_chief: bool = True,
    ) -> None:
        self._max_length = max_length
        self._report_progress = report_progress or (lambda progress: None)
        self._is_chief = is_chief

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """Exactly one operation, of the configured max_length."""
        del searcher_mode, auto_ack  # one operation, decided locally: nothing to coordinate
        length = self._length()
        _warn_deprecated()
        operation = SearcherOperation(length, self._report_progress, self._is_chief)
        yield operation
        self._check_completed(operation)

    def acknowledge_out_of_ops(self) -> None:
        """Nothing to acknowledge: there is only ever one operation."""

    def get_configured_units(self) -> Unit | None:
        self._length()
        if isinstance(self._max_length, dict):
            [unit] = self._max_length
            return Unit[unit.upper()]
        return None

    def _length(self) -> int:
        if self._max_length is None:
            raise ValueError(_DEPRECATED)
        if isinstance(self._max_length, dict):
            [value] = self._max_length.values()
            return int(value)
        return int(self._max_length)

    def _check_completed(self, operation: SearcherOperation) -> None:
        if self._is_chief and not operation._completed:
            raise RuntimeError("call op.report_completed() on each operation before asking for the next")


class RungSearcherContext(SearcherContext):
    """Seed-era ASHA (`max_length` set): one operation per rung.

    An operation's length is the searcher's current length for the trial, as the allocation
    watcher learns it (starting from DET_SEARCHER_LENGTH; 0 = max_length), so a resumed trial
    starts from its current rung. Once the chief completed an operation it flushes the metrics
    (the searcher decides from the validation, which must reach the gateway first) and waits
    for the decision: a longer length is the next operation; the searcher stopping the trial,
    or the allocation being asked to stop, ends the operations. Other workers get the chief's
    lengths by broadcast.
    """

    def __init__(
        self,
        max_length: int | dict[str, int],
        report_progress: Callable[[float], None],
        *,
        watcher: PreemptionWatcher | None,
        flush: Callable[[], None],
        distributed: DistributedContext,
        log_after_s: float = DECISION_LOG_S,
    ) -> None:
        super().__init__(max_length, report_progress, distributed.rank == 0)
        self._watcher = watcher  # the chief's; other workers are told
        self._flush = flush
        self._distributed = distributed
        self._log_after_s = log_after_s

    def operations(
        self, searcher_mode: SearcherMode = SearcherMode.WorkersAskChief, auto_ack: bool = True
    ) -> Iterator[SearcherOperation]:
        """One operation per rung until the searcher is done with the trial. When the
        operations end because the allocation was asked to stop (say, the experiment was
        paused), `auto_ack` acknowledges the stop, so the trial's exit means "resume me"."""
        if searcher_mode is SearcherMode.ChiefOnly and not self._is_chief:
            raise RuntimeError("operations() may only be called by the chief in SearcherMode.ChiefOnly")
        _warn_deprecated()
        total = self._length()
        length = self._decided(self._first_length, searcher_mode)
        while length is not None:
            operation = SearcherOperation(length, self._report_progress, self._is_chief, total)
            yield operation
            self._check_completed(operation)
            length = self._decided(functools.partial(self._next_length, length, auto_ack), searcher_mode)

    def _decided(self, decide: Callable[[], T], searcher_mode: SearcherMode) -> T:
        """The chief decides; in WorkersAskChief mode the workers receive its decision."""
        if searcher_mode is SearcherMode.ChiefOnly:
            return decide()
        decision = decide() if self._is_chief else None
        return cast(T, self._distributed.broadcast(decision))

    def _first_length(self) -> int | None:
        state = self._chiefs_watcher().state()
        if state.searcher_stopped:
            logger.info("the searcher is done with the trial: no searcher operations")
            return None
        return state.searcher_length or self._length()

    def _next_length(self, completed: int, auto_ack: bool) -> int | None:
        """The next operation's length once the searcher decided, or None when there is none
        (a stop withdrawn before `auto_ack` acknowledged it is no stop: the wait goes on)."""
        self._flush()
        while True:
            state = self._decision(completed)
            if state.searcher_stopped:
                logger.info("the searcher is done with the trial after length %d", completed)
                return None
            if not state.stop:
                return state.searcher_length
            if not auto_ack or self._chiefs_watcher().acknowledge():
                logger.info(
                    "the allocation was asked to stop (%s): no more searcher operations", state.reason
                )
                return None

    def _decision(self, completed: int) -> AllocationState:
        """Wait for the searcher's decision on the rung of length `completed`, logging waits
        long enough to suggest the validation never reached it."""
        watcher = self._chiefs_watcher()
        started = time.monotonic()

        def decided(state: AllocationState) -> bool:
            return state.stop or state.searcher_stopped or state.searcher_length > completed

        while True:
            state = watcher.wait_for(decided, self._log_after_s)
            if decided(state):
                return state
            if not watcher.watching:
                raise RuntimeError("the core context was closed while waiting for the searcher's decision")
            logger.info(
                "waiting %.0fs so far for the searcher to decide on length %d: was a validation "
                "with the searcher metric reported before op.report_completed()?",
                time.monotonic() - started,
                completed,
            )

    def _chiefs_watcher(self) -> PreemptionWatcher:
        if self._watcher is None:
            raise RuntimeError("only the chief asks the cluster for searcher operations")
        return self._watcher


def _warn_deprecated() -> None:
    warnings.warn(
        "core_context.searcher.operations() is deprecated: train for a length your code decides",
        FutureWarning,
        stacklevel=3,
    )
