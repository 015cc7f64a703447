"""`core_context.train`: metrics and progress reporting, early exits and the trial's metadata."""

import enum
import json
import logging
import os
import pathlib
import time
from collections.abc import Mapping
from typing import Any

from determined._client import MetricRecord, TrialClient
from determined.core import _checkpoint, _validate
from determined.core._metrics import MetricsShipper
from determined.tensorboard import Mangler, Selector, TrialTensorboard, every_file, same_name, trial_folder

logger = logging.getLogger("determined.core")


class TensorboardMode(enum.Enum):
    """How a trial's TensorBoard files are handled, as in Determined. AUTO: the chief writes
    the reported training and validation metrics as scalars into `get_tensorboard_path()`
    and uploads that folder to the checkpoint storage after each report and at the end.
    MANUAL: nothing is written, and `upload_tensorboard_files()` uploads."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class EarlyExitReason(enum.Enum):
    """Why a trial exits before its searcher is done with it (`report_early_exit`)."""

    # The hyperparameters cannot be trained with; the searcher replaces the trial where its
    # method does. `det.InvalidHP` raised out of `with det.core.init()` reports this.
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    # The training code decided to stop.
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


def _checked_metadata(metadata: Any) -> str:
    """`metadata` as JSON text; TypeError unless it is a dict of JSON values (NaN and
    infinities excepted: strict JSON has none), ReportTooLargeError past MAX_REPORT_BYTES."""
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    return _validate.json_object(metadata, "the trial's metadata", "metadata", allow_nan=False)


def _record(group: str, steps_completed: int, metrics: dict[str, Any]) -> MetricRecord:
    """The report as it is sent; refused here (nothing queued) when it cannot be stored."""
    steps_completed = _validate.check_steps_completed(steps_completed)
    metrics_json = _validate.metrics_json(metrics, group, steps_completed)
    return MetricRecord(group, steps_completed, metrics_json, time.time_ns())


class TrainContext:
    """Reports a trial's metrics and progress to the cluster.

    A report call only validates and queues (see `_metrics`); it blocks only when the
    shipper is far behind. Validation reports must carry the metrics an adaptive searcher
    reads (`searcher`: the experiment config's section; see _validate.SearcherMetricCheck).
    """

    def __init__(
        self,
        shipper: MetricsShipper,
        client: TrialClient,
        trial_id: int,
        searcher: Mapping[str, Any] | None = None,
        tensorboard: TrialTensorboard | None = None,
    ) -> None:
        self._shipper = shipper
        self._client = client
        self._trial_id = trial_id
        self._searcher_metrics = _validate.SearcherMetricCheck(searcher or {})
        self._tensorboard = tensorboard or TrialTensorboard(local_tensorboard_path(), auto=False)

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
        self._report("training", steps_completed, _validate.check_metrics(metrics), batch_metrics)

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
        self._searcher_metrics.check(metrics)
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

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        """Tell the cluster why the trial is about to exit early. Reported once per trial: a
        later report is ignored with a warning. INVALID_HP is what `det.InvalidHP` raised out
        of `with det.core.init()` reports by itself."""
        reason = EarlyExitReason(reason)
        logger.info("report_early_exit(%s)", reason)
        if not self._client.report_early_exit(self._trial_id, reason.name):
            logger.warning("an early exit was already reported for this trial; ignoring %s", reason)

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the trial's metadata with `metadata`, a dict of JSON values."""
        self._client.set_trial_metadata(self._trial_id, _checked_metadata(metadata))

    def get_metadata(self) -> dict[str, Any]:
        """The trial's metadata ({} until some is set)."""
        value = json.loads(self._client.get_trial_metadata(self._trial_id))
        return value if isinstance(value, dict) else {}

    def get_tensorboard_path(self) -> pathlib.Path:
        """The folder for this trial's TensorBoard files (created on demand). On a cluster it is
        `tensorboard_path()` of the checkpoint storage's local folder: the storage itself on a
        shared file system, else a staging folder uploaded as `tensorboard_mode` says."""
        return self._tensorboard.path()

    def upload_tensorboard_files(self, selector: Selector = every_file, mangler: Mangler = same_name) -> None:
        """MANUAL mode: upload the files of `get_tensorboard_path()` that are new or changed since
        their last upload, those `selector(path)` accepts (all by default), each under the name
        `mangler(relative path, rank)` (its own by default). The upload runs in the background;
        the core context's close waits for it. RuntimeError in AUTO mode, as in Determined."""
        self._tensorboard.upload(selector, mangler)

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        self._shipper.put(_record(group, steps_completed, metrics))
        self._tensorboard.reported(group, steps_completed, metrics, batch_metrics)

    def _close(self) -> None:
        """Close the TensorBoard writer and wait for the uploads (the core context's close)."""
        self._tensorboard.close()


def tensorboard_path(storage_root: pathlib.Path, experiment_id: int, trial_id: int) -> pathlib.Path:
    """A trial's TensorBoard folder under the local folder of its checkpoint storage."""
    return storage_root / trial_folder(experiment_id, trial_id)


def local_tensorboard_path(storage_root: pathlib.Path | None = None) -> pathlib.Path:
    """Off-cluster: a folder of this run's own under the checkpoint storage root."""
    root = storage_root or _checkpoint.default_storage_root()
    return root / "tensorboard" / f"local-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


class DummyTrainContext(TrainContext):
    """Off-cluster: the same checks, and reports go to the log (no shipper, no client)."""

    def __init__(self, tensorboard_path: pathlib.Path | None = None) -> None:
        self._searcher_metrics = _validate.SearcherMetricCheck({})
        self._tensorboard = TrialTensorboard(tensorboard_path or local_tensorboard_path(), auto=False)

    def report_progress(self, progress: float) -> None:
        logger.info("report_progress(%s)", _validate.check_progress(progress))

    def set_status(self, status: str) -> None:
        logger.info("set_status(%s)", _validate.check_status(status))

    def get_experiment_best_validation(self) -> float | None:
        return None

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        logger.info("report_early_exit(%s)", EarlyExitReason(reason))

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        logger.info("set_metadata(%s)", _checked_metadata(metadata))

    def get_metadata(self) -> dict[str, Any]:
        return {}

    def upload_tensorboard_files(self, selector: Selector = every_file, mangler: Mangler = same_name) -> None:
        logger.info("upload_tensorboard_files()")

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        record = _record(group, steps_completed, metrics)
        logger.info(
            "report_metrics(group=%s, steps_completed=%d, metrics=%s)", group, record.steps_completed, metrics
        )


class WorkerTrainContext(TrainContext):
    """A worker other than the chief (rank > 0) of a distributed trial: only the chief reports,
    so a report here is checked as on the chief and then dropped (said once in the log);
    what it reads (the best validation, the metadata) still comes from the cluster."""

    def __init__(
        self,
        client: TrialClient,
        trial_id: int,
        searcher: Mapping[str, Any] | None,
        rank: int,
        tensorboard: TrialTensorboard | None = None,
    ) -> None:
        self._client = client
        self._trial_id = trial_id
        self._searcher_metrics = _validate.SearcherMetricCheck(searcher or {})
        self._rank = rank
        self._tensorboard = tensorboard or TrialTensorboard(local_tensorboard_path(), auto=False)
        self._told = False

    def report_progress(self, progress: float) -> None:
        _validate.check_progress(progress)
        self._drop("progress")

    def set_status(self, status: str) -> None:
        _validate.check_status(status)
        self._drop("status")

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        EarlyExitReason(reason)
        self._drop("early exit")

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        _checked_metadata(metadata)
        self._drop("metadata")

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: dict[str, Any],
        batch_metrics: list[dict[str, Any]] | None = None,
    ) -> None:
        _record(group, steps_completed, metrics)
        self._drop(f"{group} metrics")

    def _drop(self, what: str) -> None:
        if not self._told:
            logger.info(
                "only the chief (rank 0) reports to the cluster: rank %d's reports are dropped", self._rank
            )
            self._told = True
        logger.debug("rank %d dropped its report of %s", self._rank, what)
