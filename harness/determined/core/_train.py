"""`core_context.train`: metrics and progress reporting."""

import enum
import logging
import time
from collections.abc import Mapping
from typing import Any

from determined._client import TrialClient
from determined.core import _validate
from determined.core._metrics import MetricsShipper, Report

logger = logging.getLogger("determined.core")


class TensorboardMode(enum.Enum):
    """How TensorBoard files are handled (accepted for compatibility; not synced yet)."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class TrainContext:
    """Reports a trial's metrics and progress to the cluster.

    A report call only validates and queues (see `_metrics`); it blocks only when the
    shipper is far behind. Validation reports must carry the metrics the configured searcher
    reads (`searcher`: the experiment config's section).
    """

    def __init__(
        self,
        shipper: MetricsShipper,
        client: TrialClient,
        trial_id: int,
        searcher: Mapping[str, Any] | None = None,
    ) -> None:
        self._shipper = shipper
        self._client = client
        self._trial_id = trial_id
        self._searcher_metrics = _validate.searcher_metrics(searcher or {})

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        """Report training metrics. `batch_metrics` is checked but not stored yet."""
        if batch_metrics is not None:
            if not isinstance(batch_metrics, list):
                raise TypeError(f"batch_metrics must be a list of dicts, got {type(batch_metrics).__name__}")
            for i, entry in enumerate(batch_metrics):
                _validate.check_metrics(entry, argument=f"batch_metrics[{i}]")
        self._report("training", steps_completed, _validate.check_metrics(metrics))

    def report_validation_metrics(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Report validation metrics: what the searcher decides from."""
        self.report_metrics("validation", steps_completed, metrics)

    def report_metrics(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        """Report metrics of any group (a non-empty name without '.'); "training" and
        "validation" are the built-in series, checked as their own report calls are."""
        group = _validate.check_group(group)
        if group != "validation":
            self._report(group, steps_completed, _validate.check_metrics(metrics))
            return
        checked = _validate.check_metrics(metrics, allow_none=False)
        _validate.check_searcher_metrics(metrics, self._searcher_metrics)
        self._report(group, steps_completed, checked)

    def report_progress(self, progress: float) -> None:
        """Report how far the trial is, a fraction in [0, 1]."""
        self._client.report_progress(self._trial_id, _validate.check_progress(progress))

    def set_status(self, status: str) -> None:
        """Say what the trial is doing (`det trial describe` shows it)."""
        self._client.report_status(self._trial_id, _validate.check_status(status))

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher metric any trial of the experiment reported so far, or None."""
        return self._client.get_best_validation(self._trial_id)

    def _report(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        steps_completed = _validate.check_steps_completed(steps_completed)
        self._shipper.put(Report(group, steps_completed, metrics, time.time_ns()))


class DummyTrainContext(TrainContext):
    """Off-cluster: the same checks, and reports go to the log (no shipper, no client)."""

    def __init__(self) -> None:
        self._searcher_metrics = {}

    def report_progress(self, progress: float) -> None:
        logger.info("report_progress(%s)", _validate.check_progress(progress))

    def set_status(self, status: str) -> None:
        logger.info("set_status(%s)", _validate.check_status(status))

    def get_experiment_best_validation(self) -> float | None:
        return None

    def _report(self, group: str, steps_completed: int, metrics: dict[str, Any]) -> None:
        steps_completed = _validate.check_steps_completed(steps_completed)
        logger.info(
            "report_metrics(group=%s, steps_completed=%d, metrics=%s)", group, steps_completed, metrics
        )
