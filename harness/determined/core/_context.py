"""`det.core.init()`: the one place that wires the capabilities together."""

import functools
import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

from determined import _info
from determined._client import TrialClient
from determined.common import storage as checkpoint_storages
from determined.core import _checkpoint
from determined.core._checkpoint import CheckpointContext
from determined.core._distributed import DistributedContext, DummyDistributedContext
from determined.core._errors import InvalidHP, ReportError
from determined.core._experimental import DummyExperimentalCoreContext, ExperimentalCoreContext
from determined.core._fatal import report_fatal
from determined.core._metrics import MetricsShipper
from determined.core._preempt import (
    DummyPreemptContext,
    NeverStopped,
    PreemptContext,
    PreemptionWatcher,
    PreemptMode,
)
from determined.core._profiler import DummyProfilerContext, ProfilerContext
from determined.core._searcher import ASHA_SEARCHERS, RungSearcherContext, SearcherContext
from determined.core._train import (
    DummyTrainContext,
    EarlyExitReason,
    TensorboardMode,
    TrainContext,
    WorkerTrainContext,
    local_tensorboard_path,
    tensorboard_path,
)
from determined.tensorboard import TrialTensorboard, Uploader, trial_storage

logger = logging.getLogger("determined.core")

_ALERT_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}


class Context:
    """What `with det.core.init() as core_context:` gives the training script."""

    def __init__(
        self,
        *,
        checkpoint: CheckpointContext,
        distributed: DistributedContext,
        preempt: PreemptContext,
        train: TrainContext,
        searcher: SearcherContext,
        info: _info.ClusterInfo | None,
        profiler: ProfilerContext | None = None,
        shipper: MetricsShipper | None = None,
        client: TrialClient | None = None,
        watcher: PreemptionWatcher | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed
        self.preempt = preempt
        self.train = train
        self.searcher = searcher
        self.profiler = profiler or DummyProfilerContext()
        self.info = info
        self._metrics = shipper
        self._client = client
        self._watcher = watcher
        self.experimental = (
            ExperimentalCoreContext(client, info.trial.trial_id)
            if client is not None and info is not None
            else DummyExperimentalCoreContext()
        )
        self._started = False

    def start(self) -> None:
        """Starts shipping reports and watching the allocation: what `with` does on entry,
        for a script that calls `start()` and `close()` itself (as Determined allows).
        A second call does nothing."""
        if self._started:
            return
        self._started = True
        if self._metrics is not None:
            self._metrics.start()
        if self._watcher is not None:
            self._watcher.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, InvalidHP):
            self._report_invalid_hp()
        if isinstance(exc, ReportError):
            _cannot_report(exc)
        try:
            self.close()
        except Exception as error:
            if exc_type is None:
                if isinstance(error, ReportError):
                    _cannot_report(error)
                raise
            logger.exception("closing the core context failed")
        if isinstance(exc, InvalidHP):
            logger.info("InvalidHP raised: ending the trial early with exit code 0")
            sys.exit(0)

    def _report_invalid_hp(self) -> None:
        """Tell the searcher (which replaces the trial where its method does); the exit code
        stays 0 whether or not the report gets through."""
        try:
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
        except Exception:
            logger.exception("could not report the early exit (invalid hyperparameters)")

    def alert(self, title: str | None = None, description: str | None = None, level: str = "info") -> None:
        """Raise an alert about this trial, at `level` "debug", "info", "warn" or "error".

        Determined posts it to the webhooks configured with a custom trigger. This platform has
        no webhooks yet, so the alert is written to the trial's log (logger "determined.core")
        at the matching level, where `det trial logs` and its level filter find it.
        """
        if level not in _ALERT_LEVELS:
            raise ValueError(f"level must be one of {', '.join(_ALERT_LEVELS)}, got {level!r}")
        trial_id = (
            self.info.trial.trial_id if self.info is not None and self.info.task_type == "TRIAL" else None
        )
        title = title or ("Alert" if trial_id is None else f"Alert from trial {trial_id}")
        text = f"alert: {title}" + (f": {description}" if description else "")
        logger.log(_ALERT_LEVELS[level], "%s", text)

    def close(self, *_exception: Any) -> None:
        """Stop profiling, send every queued report, stop watching the allocation, release
        the connections. (Determined's close also takes the exception being raised, which
        is ignored here: `with` handles an InvalidHP or a ReportError, `close()` does not.)"""
        try:
            self.profiler.off()
            if self._metrics is not None:
                self._metrics.close()
        finally:
            if self._watcher is not None:
                self._watcher.close()
            self.train._close()
            if self._client is not None:
                self._client.close()
            self.distributed.close()


def _cannot_report(error: ReportError) -> None:
    """An uncaught ReportError: the same code would make the same report again."""
    report_fatal(f"the cluster cannot store the trial's reports: ReportError: {error}")


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """Build the Core API context; use it as `with det.core.init() as core_context:`.

    Off-cluster the same script runs against null objects: a single process, never
    preempted, metrics logged, checkpoints in `checkpoint_storage` (a path) or the user
    data dir.
    """
    info = _info.get_cluster_info()
    if info is None or info.task_type != "TRIAL":
        return _dummy_context(info, distributed, checkpoint_storage)
    if distributed is None:
        if len(info.slot_ids) > 1 or len(info.container_addrs) > 1:
            raise ValueError("you must provide a valid DistributedContext for a multi-slot task")
        distributed = DummyDistributedContext()
    return _trial_context(info, distributed, checkpoint_storage, preempt_mode, tensorboard_mode)


def _trial_context(
    info: _info.ClusterInfo,
    distributed: DistributedContext,
    checkpoint_storage: str | dict[str, Any] | None,
    preempt_mode: PreemptMode,
    tensorboard_mode: TensorboardMode,
    client: TrialClient | None = None,
    context_type: Callable[..., Context] = Context,
) -> Context:
    """Only the chief (rank 0) reports metrics, progress and checkpoints; the other workers'
    report calls are checked and dropped (WorkerTrainContext). Each node's first process
    still ships its own profiling metrics, under a group of its own. `client` and
    `context_type`: a detached run's (core_v2: it reports with its user's login, has no
    allocation to watch, and its context says when the script is alive and how it ended)."""
    trial = info.trial
    # Built first: a storage whose library is missing (gcs, azure) fails the trial at its start.
    storage = checkpoint_storages.build(
        _checkpoint.storage_section(checkpoint_storage or trial._config.get("checkpoint_storage") or {})
    )
    client = client or TrialClient(info.master_url, info.session_token)
    tensorboard = _tensorboard(storage, trial, distributed.rank, tensorboard_mode)
    shipper = None
    reporting = None
    if distributed.local_rank == 0:
        shipper = MetricsShipper(
            functools.partial(client.report_metrics, trial.trial_id, trial._trial_run_id)
        )
        reporting = TrainContext(
            shipper, client, trial.trial_id, trial._config.get("searcher") or {}, tensorboard
        )

    def report_checkpoint(
        storage_id: str, steps_completed: int, metadata_json: str, resources: dict[str, int]
    ) -> None:
        dropped: ReportError | None = None
        try:
            if shipper is not None:
                shipper.flush()  # metrics reported before the checkpoint arrive before it
        except ReportError as error:  # an earlier report was dropped: the checkpoint still counts
            dropped = error
        client.report_checkpoint(
            uuid=storage_id,
            trial_id=trial.trial_id,
            allocation_id=info.allocation_id,
            steps_completed=steps_completed,
            metadata_json=metadata_json,
            resources=resources,
        )
        if dropped is not None:
            raise dropped

    checkpoint = CheckpointContext(
        storage,
        distributed,
        report_checkpoint,
        ask_delete=lambda storage_id: client.delete_checkpoints([storage_id]),
    )
    searcher_config = trial._config.get("searcher") or {}
    train = (
        reporting
        if distributed.rank == 0 and reporting is not None
        else WorkerTrainContext(client, trial.trial_id, searcher_config, distributed.rank, tensorboard)
    )
    watcher = _watcher(info, distributed, preempt_mode) if info.allocation_id else None
    # Each node's first process profiles its machine; the nodes report in groups of their own.
    profiling_group = (
        "profiling" if distributed.cross_rank == 0 else f"profiling-node{distributed.cross_rank}"
    )
    profiler = ProfilerContext(
        (reporting or train).report_metrics, enabled=distributed.local_rank == 0, group=profiling_group
    )
    return context_type(
        checkpoint=checkpoint,
        distributed=distributed,
        preempt=PreemptContext(watcher or NeverStopped(), distributed, preempt_mode),
        train=train,
        searcher=_searcher(searcher_config, train, shipper, watcher, distributed),
        info=info,
        profiler=profiler,
        shipper=shipper,
        client=client,
        watcher=watcher,
    )


def _tensorboard(
    storage: checkpoint_storages.StorageManager, trial: _info.TrialInfo, rank: int, mode: TensorboardMode
) -> TrialTensorboard:
    """The trial's TensorBoard folder; uploaded unless it is in the storage already (in AUTO
    mode, only the chief's)."""
    folder = tensorboard_path(_checkpoint.local_root(storage), trial.experiment_id, trial.trial_id)
    auto = TensorboardMode(mode) is TensorboardMode.AUTO
    trials = trial_storage(storage, trial.experiment_id)
    uploader = None
    if trials.local_path(str(trial.trial_id)) != folder and not (auto and rank != 0):
        uploader = Uploader(folder, trials, str(trial.trial_id), rank)
    return TrialTensorboard(folder, auto=auto, uploader=uploader)


def _watcher(
    info: _info.ClusterInfo, distributed: DistributedContext, preempt_mode: PreemptMode
) -> PreemptionWatcher | None:
    """The chief watches the allocation (and in WorkersAskMaster mode every worker does);
    the other workers get the chief's answers by broadcast."""
    if distributed.rank != 0 and preempt_mode is not PreemptMode.WorkersAskMaster:
        return None
    client = TrialClient(info.master_url, info.session_token, what="watching the allocation")
    return PreemptionWatcher(client, info.allocation_id, info.trial._searcher_length)


def _searcher(
    config: dict[str, Any],
    train: TrainContext,
    shipper: MetricsShipper | None,
    watcher: PreemptionWatcher | None,
    distributed: DistributedContext,
) -> SearcherContext:
    """Seed-era ASHA trains rung by rung; every other searcher, one operation of max_length."""
    max_length = config.get("max_length")
    if max_length is None or config.get("name") not in ASHA_SEARCHERS:
        return SearcherContext(max_length, train.report_progress, distributed.rank == 0)
    return RungSearcherContext(
        max_length,
        train.report_progress,
        watcher=watcher,
        flush=shipper.flush if shipper is not None else _nothing_to_flush,
        distributed=distributed,
    )


def _nothing_to_flush() -> None:
    """A worker that ships nothing (only the chief decides searcher operations anyway)."""


def _dummy_context(
    info: _info.ClusterInfo | None,
    distributed: DistributedContext | None,
    checkpoint_storage: str | dict[str, Any] | None,
) -> Context:
    distributed = distributed or DummyDistributedContext()
    storage = (
        checkpoint_storages.build(_checkpoint.storage_section(checkpoint_storage))
        if checkpoint_storage
        else checkpoint_storages.LocalStorageManager(_checkpoint.default_storage_root())
    )
    checkpoint = CheckpointContext(storage, distributed, _log_checkpoint)
    train = DummyTrainContext(local_tensorboard_path(_checkpoint.local_root(storage)))
    return Context(
        checkpoint=checkpoint,
        distributed=distributed,
        preempt=DummyPreemptContext(distributed),
        train=train,
        # Off-cluster, as in Determined: one operation of length 1.
        searcher=SearcherContext(1, train.report_progress, distributed.rank == 0),
        info=info,
    )


def _log_checkpoint(
    storage_id: str, steps_completed: int, metadata_json: str, resources: dict[str, int]
) -> None:
    logger.info(
        "stored checkpoint %s at steps_completed=%d (%d files)", storage_id, steps_completed, len(resources)
    )
