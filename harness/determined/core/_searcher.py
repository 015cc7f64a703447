"""`core_context.searcher`: deprecated in Determined 0.38, kept so that
scripts written for older releases run unchanged.

As in 0.38, it only exists when the config has `searcher.max_length`: then
`operations()` yields exactly one operation of that length and never asks the
master for more; training length otherwise belongs in user code, and the
searcher stops trials itself from the validation metrics it receives. Without
`max_length` every use says so.
"""

import enum
import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

logger = logging.getLogger("determined.core")

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

    def __init__(self, length: int, report_progress: Callable[[float], None], is_chief: bool) -> None:
        self._length = length
        self._report_progress = report_progress
        self._is_chief = is_chief
        self._completed = False

    @property
    def length(self) -> int:
        return self._length

    def report_progress(self, length: float) -> None:
        """Progress as a length trained so far; sent as a fraction of `length`."""
        self._check_chief("report_progress")
        self._report_progress(min(max(length / self._length, 0.0), 1.0) if self._length else 1.0)

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
        warnings.warn(
            "core_context.searcher.operations() is deprecated: train for a length your code decides",
            FutureWarning,
            stacklevel=2,
        )
        operation = SearcherOperation(length, self._report_progress, self._is_chief)
        yield operation
        if self._is_chief and not operation._completed:
            raise RuntimeError("call op.report_completed() on each operation before asking for the next")

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
