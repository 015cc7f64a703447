"""`det.pytorch.init()` and `det.pytorch.Trainer`: train a PyTorchTrial on a cluster or off it."""

import contextlib
import inspect
import logging
import os
import pathlib
import random
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed

import determined as det
from determined import core
from determined.common.entrypoint import TEST_MODE_VARIABLE
from determined.common.expconf import SearcherConfig
from determined.core._searcher import ASHA_SEARCHERS
from determined.pytorch._controller import Settings, TrialController
from determined.pytorch._pytorch_context import PyTorchTrialContext
from determined.pytorch._pytorch_trial import PyTorchTrial
from determined.pytorch._units import Batch, Epoch, Record, TrainUnit

logger = logging.getLogger("determined.pytorch")

CHECKPOINT_POLICIES = ("best", "all", "none")
# Off-cluster there is no config: the config model's default.
SMALLER_IS_BETTER: bool = SearcherConfig.model_fields["smaller_is_better"].default
_TIME_METRIC_UNITS: dict[str, type[TrainUnit]] = {"batches": Batch, "epochs": Epoch, "records": Record}


def _on_cluster() -> det.ClusterInfo | None:
    info = det.get_cluster_info()
    return info if info is not None and info.task_type == "TRIAL" else None


def _seed_everything(seed: int) -> None:
    """The same seed on every worker, as in Determined: the data loaders shard by rank."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@contextlib.contextmanager
def init(
    *,
    hparams: dict[str, Any] | None = None,
    exp_conf: dict[str, Any] | None = None,
    distributed: core.DistributedContext | None = None,
    aggregation_frequency: int = 1,
    enable_tensorboard_logging: bool = True,
) -> Iterator[PyTorchTrialContext]:
    """The PyTorchTrialContext a Trainer trains with: `with det.pytorch.init() as context:`.

    On a cluster the hyperparameters, config and seed are the trial's (`hparams` and
    `exp_conf` are ignored) and, under the torch_distributed launcher, torch.distributed is
    set up here. Off it, `hparams` and `exp_conf` stand in for them; the seed is the config's
    `reproducibility.experiment_seed`, else 0. Checkpoints then go to the config's
    `checkpoint_storage` when it has one.
    """
    info = _on_cluster()
    if info is not None:
        hparams = info.trial.hparams
        exp_conf = info.trial._config
        seed = info.trial.trial_seed
        steps_completed = info.trial._steps_completed
        optimizations = exp_conf.get("optimizations") or {}
        aggregation_frequency = int(optimizations.get("aggregation_frequency") or aggregation_frequency)
        checkpoint_storage = None
    else:
        exp_conf = exp_conf or {}
        seed = int((exp_conf.get("reproducibility") or {}).get("experiment_seed") or 0)
        steps_completed = 0
        checkpoint_storage = exp_conf.get("checkpoint_storage")
    created_group = False
    if distributed is None and os.environ.get("USE_TORCH_DISTRIBUTED"):
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        created_group = True
        distributed = core.DistributedContext.from_torch_distributed()
    try:
        _seed_everything(seed)
        with core.init(
            distributed=distributed,
            checkpoint_storage=checkpoint_storage,
            preempt_mode=core.PreemptMode.WorkersAskChief,
            tensorboard_mode=core.TensorboardMode.MANUAL,
        ) as core_context:
            context = PyTorchTrialContext(
                core_context,
                trial_seed=seed,
                hparams=hparams,
                slots_per_trial=core_context.distributed.size,
                num_gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
                exp_conf=exp_conf,
                aggregation_frequency=aggregation_frequency,
                steps_completed=steps_completed,
                managed_training=True,
                debug_enabled=bool(exp_conf.get("debug")),
                enable_tensorboard_logging=enable_tensorboard_logging,
            )
            try:
                yield context
            finally:
                if context._tensorboard_writer is not None:
                    context._tensorboard_writer.close()
    finally:
        if created_group:
            torch.distributed.destroy_process_group()


class Trainer:
    """Trains a PyTorchTrial: `Trainer(MyTrial(context), context).fit(max_length=Epoch(3))`."""

    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext) -> None:
        self._trial = trial
        self._context = context
        self._core = context._core

    def fit(
        self,
        checkpoint_period: TrainUnit | None = None,
        validation_period: TrainUnit | None = None,
        max_length: TrainUnit | None = None,
        reporting_period: TrainUnit | None = None,
        checkpoint_policy: str = "best",
        latest_checkpoint: str | None = None,
        step_zero_validation: bool = False,
        test_mode: bool = False,
        profiling_enabled: bool = False,
    ) -> None:
        """Train until `max_length`, validating every `validation_period`, checkpointing every
        `checkpoint_period` and per `checkpoint_policy` ("best": after a validation that beats
        the experiment's best searcher metric; "all": after every validation; "none": only at
        the end and when stopped), reporting training metrics every `reporting_period`
        (default Batch(100)). Returns when done, or early, after a checkpoint, when the
        cluster preempts the trial or the trial calls `context.set_stop_requested(True)`.

        `latest_checkpoint` (a checkpoint's storage_id) resumes from it; on a cluster it
        defaults to the trial's latest checkpoint. `test_mode` trains and validates one batch
        and checkpoints once; a run started by `det experiment create --test-mode`, on the cluster
        or `--local` (DET_TEST_MODE=1 in its environment), runs so whatever is passed.
        """
        info = _on_cluster()
        test_mode = test_mode or os.environ.get(TEST_MODE_VARIABLE) == "1"
        config = self._context._exp_conf or {}
        searcher = config.get("searcher") or {}
        if checkpoint_policy not in CHECKPOINT_POLICIES:
            raise ValueError(
                f"checkpoint_policy must be one of {', '.join(map(repr, CHECKPOINT_POLICIES))}, "
                f"got {checkpoint_policy!r}"
            )
        if info is None and checkpoint_policy == "best":
            logger.info(
                "checkpoint_policy='best' needs a cluster's searcher: checkpointing after every validation"
            )
            checkpoint_policy = "all"
        if info is not None and latest_checkpoint is None:
            latest_checkpoint = info.latest_checkpoint
        if max_length is None and not test_mode:
            if info is None or searcher.get("max_length") is None:
                raise ValueError(
                    "Trainer.fit() needs max_length, e.g. max_length=det.pytorch.Epoch(5) "
                    "(only a cluster experiment with the deprecated searcher.max_length may leave it out)"
                )
            warnings.warn(
                "training for searcher.max_length is deprecated: pass max_length to Trainer.fit()",
                FutureWarning,
                stacklevel=2,
            )
        if max_length is not None:
            _check_asha_length(max_length, searcher)
        settings = Settings(
            max_length=max_length,
            reporting_period=reporting_period or Batch(100),
            validation_period=validation_period,
            checkpoint_period=checkpoint_period,
            checkpoint_policy=checkpoint_policy,
            latest_checkpoint=latest_checkpoint,
            step_zero_validation=step_zero_validation,
            test_mode=test_mode,
            searcher_metric=searcher.get("metric"),
            smaller_is_better=bool(searcher.get("smaller_is_better", SMALLER_IS_BETTER)),
            code_folder=pathlib.Path.cwd() if info is not None else _trial_folder(self._trial),
        )
        if profiling_enabled:
            self._core.profiler.on()
        try:
            TrialController(self._trial, self._context, settings).run()
        finally:
            if profiling_enabled:
                self._core.profiler.off()


def _trial_folder(trial: PyTorchTrial) -> pathlib.Path:
    """Off-cluster, the code a checkpoint copies: the folder of the trial's module."""
    return pathlib.Path(inspect.getfile(type(trial))).resolve().parent


def _check_asha_length(max_length: TrainUnit, searcher: dict[str, Any]) -> None:
    """ASHA decides by `max_time` in `time_metric`: say so when max_length disagrees."""
    if searcher.get("name") not in ASHA_SEARCHERS or searcher.get("max_time") is None:
        return
    time_metric = searcher.get("time_metric")
    unit = _TIME_METRIC_UNITS.get(str(time_metric))
    if unit is None:
        logger.warning(
            "searcher.time_metric %r is not one the Trainer counts (batches, epochs or records): "
            "it cannot check max_length=%r against searcher.max_time",
            time_metric,
            max_length,
        )
    elif max_length != unit(int(searcher["max_time"])):
        logger.warning(
            "max_length=%r disagrees with the searcher's max_time=%s %s: ASHA's rungs follow the searcher",
            max_length,
            searcher["max_time"],
            time_metric,
        )
