"""The Trainer's loop: train batch after batch and, at the boundaries of the reporting,
validation and checkpoint periods, report, validate, checkpoint and ask whether to stop.

Between boundaries a batch costs `train_batch` and a little bookkeeping: no collective, no
call to the cluster, no wait for the device. Every worker reaches the same boundaries in the
same order, so the collectives there line up.
"""

import dataclasses
import inspect
import logging
import math
import pathlib
from typing import Any

import torch

import determined as det
from determined.core._searcher import SearcherOperation
from determined.pytorch import _metrics, _state
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._data import _TrainingStream, _validation_batches
from determined.pytorch._lr_scheduler import LRScheduler
from determined.pytorch._pytorch_context import PyTorchTrialContext
from determined.pytorch._pytorch_trial import PyTorchTrial
from determined.pytorch._reducer import _reduce_batch_metrics
from determined.pytorch._units import Batch, Epoch, Record, TrainUnit

logger = logging.getLogger("determined.pytorch")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What `Trainer.fit` decided, for one run of the loop."""

    max_length: TrainUnit | None  # None: the searcher's operations decide (deprecated)
    reporting_period: TrainUnit
    validation_period: TrainUnit | None
    checkpoint_period: TrainUnit | None
    checkpoint_policy: str  # "best", "all" or "none"
    latest_checkpoint: str | None
    step_zero_validation: bool
    test_mode: bool
    searcher_metric: str | None
    smaller_is_better: bool
    code_folder: pathlib.Path


class _Stop(Exception):
    """Training ends early (preemption or a requested stop) after its checkpoint."""


class TrialController:
    def __init__(self, trial: PyTorchTrial, context: PyTorchTrialContext, settings: Settings) -> None:
        self._trial = trial
        self._context = context
        self._core = context._core
        self._settings = settings
        self._distributed = context.distributed
        self._is_chief = self._distributed.rank == 0
        self._callbacks: dict[str, PyTorchCallback] = {}
        self._metrics = _metrics.TrainingMetrics()
        self._batches_trained = 0
        self._last_validation: int | None = None
        self._last_checkpoint: int | None = None
        self._last_report = 0
        self._last_metrics: dict[str, Any] = {}
        self._global_batch_size: int | None = None
        self._target = 0  # the batch count the current stretch of training ends at
        self._operation: SearcherOperation | None = None  # deprecated searcher lengths only
        self._evaluate_full_dataset = _overrides(trial, "evaluate_full_dataset")
        self._code: list[tuple[pathlib.Path, str]] = []

    def run(self) -> None:
        trial, context, settings = self._trial, self._context, self._settings
        _check_evaluation(trial)
        context._test_mode = settings.test_mode
        self._callbacks = dict(trial.build_callbacks())
        # Built before a checkpoint's generators are restored, as in the run that saved it: a
        # det.pytorch.DataLoader draws its shuffling seed when it is built.
        training_data = trial.build_training_data_loader()
        self._validation_data = trial.build_validation_data_loader()
        if settings.latest_checkpoint is not None:
            self._restore(settings.latest_checkpoint)
        self._stream = _TrainingStream(
            training_data,
            rank=self._distributed.rank,
            size=self._distributed.size,
            first_batch=self._batches_trained,
        )
        self._epoch_len = self._stream.epoch_len
        context._epoch_len = self._epoch_len
        self._batches = iter(self._stream)
        if self._is_chief:
            self._code = _state.code_files(settings.code_folder, self._core.checkpoint._root)
        self._global_batch_size = _global_batch_size(context, training_data)
        for callback in self._callbacks.values():
            callback.on_trial_startup(self._batches_trained, settings.latest_checkpoint)
        try:
            self._run()
        except _Stop:
            pass
        finally:
            for callback in self._callbacks.values():
                callback.on_trial_shutdown()

    def _run(self) -> None:
        settings = self._settings
        if settings.step_zero_validation and self._batches_trained == 0 and not settings.test_mode:
            self._validate()
        for callback in self._callbacks.values():
            callback.on_training_start()
        if settings.test_mode:
            self._train_to(self._batches_trained + 1)
            self._finish()
            return
        if settings.max_length is not None:
            self._train_to(self._to_batches(settings.max_length))
            self._finish()
            return
        for operation in self._core.searcher.operations():
            self._operation = operation
            self._train_to(self._op_batches(operation))
            metrics = (
                self._validate() if self._last_validation != self._batches_trained else self._last_metrics
            )
            if self._is_chief:
                operation.report_completed(metrics.get(settings.searcher_metric or ""))
        self._finish()

    def _finish(self) -> None:
        """The end of training: a final validation and checkpoint unless already current."""
        if self._last_validation != self._batches_trained:
            self._validate()
        if self._last_checkpoint != self._batches_trained:
            self._checkpoint()

    # -- training ------------------------------------------------------------------------------

    def _train_to(self, target: int) -> None:
        """Train until `target` batches are trained, stopping at each boundary on the way."""
        self._target = target
        trial, context, metrics = self._trial, self._context, self._metrics
        callbacks = list(self._callbacks.values())
        epoch_len = self._epoch_len
        per_batch = [
            s for s in context.lr_schedulers if s._step_mode is LRScheduler.StepMode.STEP_EVERY_BATCH
        ]
        per_epoch = [
            s for s in context.lr_schedulers if s._step_mode is LRScheduler.StepMode.STEP_EVERY_EPOCH
        ]
        to_device = _auto_to_device(context)
        boundary = self._next_boundary()
        while self._batches_trained < target:
            batch_idx, batch = next(self._batches)
            epoch_idx = batch_idx // epoch_len
            if batch_idx % epoch_len == 0:
                for callback in callbacks:
                    callback.on_training_epoch_start(epoch_idx)
            context._current_batch_idx = batch_idx
            if to_device:
                batch = context.to_device(batch)
            metrics.add(trial.train_batch(batch, epoch_idx, batch_idx))
            trained = self._batches_trained = batch_idx + 1
            for scheduler in per_batch:
                if trained % scheduler._frequency == 0:
                    scheduler.step()
            if trained % epoch_len == 0:
                for scheduler in per_epoch:
                    if (epoch_idx + 1) % scheduler._frequency == 0:
                        scheduler.step()
                for callback in callbacks:
                    callback.on_training_epoch_end(epoch_idx)
            if trained >= boundary:
                self._boundary()
                boundary = self._next_boundary()

    def _next_boundary(self) -> int:
        done = self._batches_trained
        settings = self._settings
        periods = [settings.reporting_period, settings.validation_period, settings.checkpoint_period]
        nexts = [_next_multiple(done, period) for period in map(self._period, periods) if period is not None]
        return min([*nexts, self._target])

    def _boundary(self) -> None:
        """Report, validate, checkpoint as due; then stop if asked to."""
        done = self._batches_trained
        settings = self._settings
        stop_requested = self._report_training()
        at_end = done >= self._target
        if _due(done, self._period(settings.validation_period)) or (
            at_end and settings.max_length is not None
        ):
            self._validate()
        if _due(done, self._period(settings.checkpoint_period)) and self._last_checkpoint != done:
            self._checkpoint()
        if stop_requested:  # the trial ends as done, as in Determined (no early exit reported)
            logger.info("training stops at batch %d: context.set_stop_requested(True)", done)
            self._stop()
            raise _Stop()
        if self._core.preempt.should_preempt():
            logger.info("training stops at batch %d: the cluster asked the trial to stop", done)
            self._context.set_stop_requested(True)
            self._stop()
            raise _Stop()

    def _stop(self) -> None:
        if self._last_checkpoint != self._batches_trained:
            self._checkpoint()

    def _report_training(self) -> bool:
        """Report the period's training metrics, averaged over its batches and the workers;
        whether any worker asked to stop."""
        batches = self._metrics.take()
        reduced = self._context._reducers.reduce_metrics(for_training=True)
        self._context._reducers.reset_reducers()
        gathered = self._distributed.allgather((batches, self._context.get_stop_requested()))
        stop = any(asked for _, asked in gathered)
        done = self._batches_trained
        if done == self._last_report:
            return stop
        self._last_report = done
        all_batches = [batch for worker_batches, _ in gathered for batch in worker_batches]
        metrics = {**_metrics.average(all_batches), **reduced}
        if self._is_chief:
            self._core.train.report_training_metrics(done, metrics, batch_metrics=all_batches)
            self._write_scalars("training", metrics)
            self._report_progress()
        for callback in self._callbacks.values():
            callback.on_training_workload_end(metrics, all_batches)
        return stop

    def _report_progress(self) -> None:
        """How far training is: of max_length, or (deprecated searcher lengths) of the
        current operation, in its unit, which the operation turns into the trial's fraction."""
        done, target = self._batches_trained, max(self._target, 1)
        if self._operation is not None:
            self._operation.report_progress(self._operation.length * min(done / target, 1.0))
            return
        if self._settings.max_length is not None and not self._settings.test_mode:
            target = max(self._to_batches(self._settings.max_length), 1)
        self._core.train.report_progress(min(done / target, 1.0))

    # -- validation ----------------------------------------------------------------------------

    def _validate(self) -> dict[str, Any]:
        """Validate; the generators are left as they were, so that where validations happen
        does not change training."""
        done = self._batches_trained
        saved_rng = _state.rng_state()
        models = self._context.models
        modes = [model.training for model in models]
        for model in models:
            model.eval()
        self._context._reducers.reset_reducers()
        for callback in self._callbacks.values():
            callback.on_validation_start()
        try:
            with torch.no_grad():
                metrics = self._evaluate()
        finally:
            for model, mode in zip(models, modes, strict=True):
                model.train(mode)
            _state.set_rng_state(saved_rng)
        metrics.setdefault("batches", done)
        metrics.setdefault("epochs", done // self._epoch_len)
        self._last_validation = done
        self._last_metrics = metrics
        checkpoint = False
        if self._is_chief:
            checkpoint = self._beats_best(metrics)
            self._core.train.report_validation_metrics(done, metrics)
            self._write_scalars("validation", metrics)
        for callback in self._callbacks.values():
            callback.on_validation_end(metrics)
        if self._distributed.broadcast(checkpoint) and not self._settings.test_mode:
            self._checkpoint()
        return metrics

    def _evaluate(self) -> dict[str, Any]:
        trial, context = self._trial, self._context
        result: dict[str, Any]
        if self._evaluate_full_dataset:
            whole = _validation_batches(self._validation_data, rank=0, size=1)
            metrics = trial.evaluate_full_dataset(whole) if self._is_chief else None  # type: ignore[arg-type]
            shared: dict[str, Any] | None = self._distributed.broadcast(metrics)  # the chief's
            result = shared or {}
        else:
            to_device = _auto_to_device(context)
            # Determined accepts evaluate_batch(self, batch) without the index too.
            evaluate: Any = trial.evaluate_batch
            pass_index = len(inspect.signature(evaluate).parameters) >= 2
            outputs = []
            shard = _validation_batches(
                self._validation_data, rank=self._distributed.rank, size=self._distributed.size
            )
            for batch_idx, batch in enumerate(shard):
                if to_device:
                    batch = context.to_device(batch)
                outputs.append(evaluate(batch, batch_idx) if pass_index else evaluate(batch))
                if self._settings.test_mode:
                    break
            result = _reduce_batch_metrics(trial.evaluation_reducer(), outputs, self._distributed)
        return {**result, **context._reducers.reduce_metrics(for_training=False)}

    def _beats_best(self, metrics: dict[str, Any]) -> bool:
        """Whether the checkpoint policy wants a checkpoint after this validation (chief)."""
        policy = self._settings.checkpoint_policy
        if policy != "best":
            return policy == "all"
        name = self._settings.searcher_metric
        if name is None or name not in metrics:
            return False
        best = self._core.train.get_experiment_best_validation()
        value = float(metrics[name])
        if best is None:
            return True
        return value < best if self._settings.smaller_is_better else value > best

    # -- checkpoints ---------------------------------------------------------------------------

    def _checkpoint(self) -> None:
        done = self._batches_trained
        rng_states = self._distributed.allgather(_state.rng_state())
        self._last_checkpoint = done
        if not self._is_chief:
            return
        context = self._context
        state = _state.trainer_state(context, self._callbacks, done, rng_states)
        for callback in self._callbacks.values():
            callback.on_checkpoint_save_start(state)
        metadata = {
            "steps_completed": done,
            "framework": f"torch-{torch.__version__}",
            "format": "pickle",
            "determined_version": det.__version__,
        }
        load_data = _state.load_data(self._trial, context._exp_conf, context._hparams)
        with self._core.checkpoint.store_path(metadata) as (path, storage_id):
            _state.write_checkpoint(path, state, load_data, self._code)
            for callback in self._callbacks.values():
                callback.on_checkpoint_write_end(str(path))
        logger.info("checkpoint %s at batch %d", storage_id, done)
        for callback in self._callbacks.values():
            callback.on_checkpoint_upload_end(storage_id)

    def _restore(self, storage_id: str) -> None:
        with self._core.checkpoint.restore_path(storage_id) as path:
            state = _state.read_state(path)
        for callback in self._callbacks.values():
            callback.on_checkpoint_load_start(state)
        self._batches_trained = _state.restore(self._context, self._callbacks, state, self._distributed.rank)
        # What the checkpoint holds is already reported, validated and stored.
        self._last_report = self._last_checkpoint = self._batches_trained
        logger.info("resumed from checkpoint %s at batch %d", storage_id, self._batches_trained)

    # -- units ---------------------------------------------------------------------------------

    def _to_batches(self, unit: TrainUnit) -> int:
        if isinstance(unit, Batch):
            return unit.value
        if isinstance(unit, Epoch):
            return unit.value * self._epoch_batches()
        if isinstance(unit, Record):
            if self._global_batch_size is None:
                raise ValueError(
                    f"{unit!r} needs the global batch size: set the hyperparameter global_batch_size"
                )
            return math.ceil(unit.value / self._global_batch_size)
        raise TypeError(f"expected Batch, Epoch or Record, got {unit!r}")

    def _period(self, unit: TrainUnit | None) -> int | None:
        """A period in batches (at least 1), or None for no period."""
        return None if unit is None else max(self._to_batches(unit), 1)

    def _epoch_batches(self) -> int:
        """An epoch in batches: `records_per_epoch` of the config when it gives one, else
        the training loader's length."""
        records_per_epoch = (self._context._exp_conf or {}).get("records_per_epoch")
        if records_per_epoch:
            return max(self._to_batches(Record(int(records_per_epoch))), 1)
        return self._epoch_len

    def _op_batches(self, operation: SearcherOperation) -> int:
        unit = self._core.searcher.get_configured_units()
        name = unit.value.lower() if unit is not None else "batches"
        return self._to_batches(TrainUnit._from_values(**{name: operation.length}))

    def _write_scalars(self, group: str, metrics: dict[str, Any]) -> None:
        """Write the scalars and upload the TensorBoard folder (the Trainer's core context is in
        MANUAL mode: it writes its own scalars)."""
        if self._context.get_enable_tensorboard_logging():
            _metrics.write_scalars(
                self._context.get_tensorboard_writer(), group, self._batches_trained, metrics
            )
            self._core.train.upload_tensorboard_files()


def _next_multiple(done: int, period: int) -> int:
    return (done // period + 1) * period


def _due(done: int, period: int | None) -> bool:
    return period is not None and done % period == 0


def _overrides(trial: PyTorchTrial, method: str) -> bool:
    return getattr(type(trial), method) is not getattr(PyTorchTrial, method)


def _check_evaluation(trial: PyTorchTrial) -> None:
    batch, full = _overrides(trial, "evaluate_batch"), _overrides(trial, "evaluate_full_dataset")
    if batch == full:
        raise TypeError(
            f"{type(trial).__name__} must override exactly one of evaluate_batch and evaluate_full_dataset"
            + (", not both" if batch else "")
        )


def _auto_to_device(context: PyTorchTrialContext) -> bool:
    return context.experimental._auto_to_device


def _global_batch_size(context: PyTorchTrialContext, data: Any) -> int | None:
    """From the `global_batch_size` hyperparameter, else the loader's batch size times the
    workers; None when neither says."""
    if "global_batch_size" in (context._hparams or {}):
        return context.get_global_batch_size()
    batch_size = getattr(data, "batch_size", None)
    return batch_size * context.distributed.size if isinstance(batch_size, int) else None
