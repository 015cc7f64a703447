"""`PyTorchTrialContext`: what a PyTorchTrial is built with and trains through.

The trial wraps its models, optimizers, LR schedulers and gradient scalers here, so that the
Trainer can move them to the device, distribute them (DistributedDataParallel), checkpoint
and restore them; and it calls `backward()` and `step_optimizer()` here, so that gradient
aggregation (`aggregation_frequency`) happens without changing its code.

`det.pytorch.init()` builds it from a Core API context. The Trainer reads and sets what the
trial wrapped (`models`, `optimizers`, `lr_schedulers`, `_scalers`, `_reducers`) and where
training is (`_current_batch_idx`, `_epoch_len`, `_test_mode`); it closes
`_tensorboard_writer` when one was made.
"""

import contextlib
import logging
import pathlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

import torch

from determined import core
from determined._info import TrialInfo
from determined.pytorch._data import to_device
from determined.pytorch._experimental import PyTorchExperimentalContext
from determined.pytorch._lr_scheduler import LRScheduler
from determined.pytorch._reducer import MetricReducer, _PyTorchReducerContext, _SimpleReducer

logger = logging.getLogger("determined.pytorch")

R = TypeVar("R", bound=MetricReducer)


class _HyperparameterNotFoundError(KeyError, ValueError):
    """A missing hyperparameter: a KeyError as for any dict, and a ValueError as Determined
    raises, so that existing `except` clauses of either kind still catch it."""

    def __str__(self) -> str:
        return str(self.args[0])


class PyTorchTrialContext:
    def __init__(
        self,
        core_context: core.Context,
        *,
        trial_seed: int,
        hparams: dict[str, Any] | None,
        slots_per_trial: int,
        num_gpus: int,
        exp_conf: dict[str, Any] | None,
        aggregation_frequency: int,
        steps_completed: int,
        managed_training: bool,
        debug_enabled: bool,
        enable_tensorboard_logging: bool = True,
    ) -> None:
        if isinstance(aggregation_frequency, bool) or aggregation_frequency < 1:
            raise ValueError(f"aggregation_frequency must be at least 1, got {aggregation_frequency!r}")
        self._core = core_context
        self.distributed: core.DistributedContext = core_context.distributed
        self._trial_seed = trial_seed
        self._hparams = hparams
        self._slots_per_trial = slots_per_trial
        self._num_gpus = num_gpus
        self._exp_conf = exp_conf
        self._aggregation_frequency = aggregation_frequency
        self._steps_completed = steps_completed
        self._managed_training = managed_training
        self._debug_enabled = debug_enabled
        self._enable_tensorboard_logging = enable_tensorboard_logging
        self.device = self._choose_device()

        self.models: list[torch.nn.Module] = []
        self.optimizers: list[torch.optim.Optimizer] = []
        self.lr_schedulers: list[LRScheduler] = []
        self._scalers: list[Any] = []
        self._reducers = _PyTorchReducerContext(self.distributed.allgather)
        # Optimizers wrapped with average_aggregated_gradients=False (by identity).
        self._summed_gradients: list[torch.optim.Optimizer] = []
        self._to_device_warned_types: set[type] = set()

        self._current_batch_idx: int | None = None
        self._epoch_len: int | None = None
        self._stop_requested = False
        self._test_mode = False
        self._tensorboard_writer: Any = None
        self.profiler: Any = None
        self.experimental = PyTorchExperimentalContext(self)

    # -- the trial's settings -----------------------------------------------------------------

    def get_hparams(self) -> dict[str, Any]:
        """The trial's hyperparameters."""
        if self._hparams is None:
            raise ValueError(
                "this trial has no hyperparameters: on a cluster they come from the experiment "
                "config; off-cluster pass hparams=... to det.pytorch.init()"
            )
        return self._hparams

    def get_hparam(self, name: str) -> Any:
        """One hyperparameter; the error for a missing one lists those there are."""
        hparams = self._hparams or {}
        if name not in hparams:
            there = ", ".join(repr(key) for key in hparams) or "none (no hparams were given)"
            raise _HyperparameterNotFoundError(
                f"no hyperparameter {name!r}; the trial's hyperparameters are: {there}"
            )
        return hparams[name]

    def get_global_batch_size(self) -> int:
        """The `global_batch_size` hyperparameter, rounded down to a multiple of the slots."""
        return self._batch_sizes()[1]

    def get_per_slot_batch_size(self) -> int:
        """The batch size each worker trains on: the global batch size over the slots."""
        return self._batch_sizes()[0]

    def _batch_sizes(self) -> tuple[int, int]:
        if "global_batch_size" not in (self._hparams or {}):
            raise ValueError(
                "the batch size comes from the hyperparameter global_batch_size, which this trial "
                "does not have: set it in the experiment config's hyperparameters (or in "
                "det.pytorch.init(hparams=...))"
            )
        global_batch_size = int(self.get_hparam("global_batch_size"))
        slots = max(self._slots_per_trial, 1)
        if global_batch_size < slots:
            raise ValueError(
                f"global_batch_size ({global_batch_size}) must be at least the number of slots ({slots})"
            )
        per_slot = global_batch_size // slots
        if per_slot * slots != global_batch_size:
            logger.warning(
                "global_batch_size %d does not divide over %d slots: using %d (%d per slot)",
                global_batch_size, slots, per_slot * slots, per_slot,
            )  # fmt: skip
        return per_slot, per_slot * slots

    def get_experiment_config(self) -> dict[str, Any]:
        """The experiment config (on a cluster, the master's; off-cluster, `exp_conf`)."""
        if self._exp_conf is None:
            raise ValueError(
                "this trial has no experiment config: off-cluster pass exp_conf=... to det.pytorch.init()"
            )
        return self._exp_conf

    def get_data_config(self) -> dict[str, Any]:
        """The experiment config's `data` section."""
        data: dict[str, Any] = self.get_experiment_config().get("data") or {}
        return data

    def get_experiment_id(self) -> int:
        return self._trial_info().experiment_id

    def get_trial_id(self) -> int:
        return self._trial_info().trial_id

    def _trial_info(self) -> TrialInfo:
        info = self._core.info
        if info is None or info.task_type != "TRIAL":
            raise RuntimeError("experiment and trial ids exist only when the trial runs on a cluster")
        return info.trial

    def get_trial_seed(self) -> int:
        return self._trial_seed

    def get_stop_requested(self) -> bool:
        """Whether training stops at the next reporting boundary."""
        return self._stop_requested

    def set_stop_requested(self, stop_requested: bool) -> None:
        """Ask the Trainer to checkpoint and stop at the next reporting boundary; on a cluster
        the trial then ends as completed early (as a searcher stop would)."""
        if not isinstance(stop_requested, bool):
            raise TypeError(f"set_stop_requested() takes a bool, got {stop_requested!r}")
        self._stop_requested = stop_requested

    # -- where training is --------------------------------------------------------------------

    def current_train_batch(self) -> int:
        """The index of the batch being trained (counting from 0 over the whole trial)."""
        return self._batch_index()

    def current_train_epoch(self) -> int:
        return self._batch_index() // self._epoch_length()

    def is_epoch_start(self) -> bool:
        """Whether the batch being trained is the first of an epoch."""
        return self._batch_index() % self._epoch_length() == 0

    def is_epoch_end(self) -> bool:
        """Whether the batch being trained is the last of an epoch."""
        return (self._batch_index() + 1) % self._epoch_length() == 0

    def _batch_index(self) -> int:
        if self._current_batch_idx is None:
            raise RuntimeError("training has not started: there is no current batch yet")
        return self._current_batch_idx

    def _epoch_length(self) -> int:
        if self._epoch_len is None:
            raise RuntimeError("training has not started: the epoch length is not known yet")
        return self._epoch_len

    # -- TensorBoard --------------------------------------------------------------------------

    def get_enable_tensorboard_logging(self) -> bool:
        """Whether the Trainer writes the metrics it reports as TensorBoard scalars."""
        return self._enable_tensorboard_logging

    def get_tensorboard_path(self) -> pathlib.Path:
        """The trial's TensorBoard folder."""
        return self._core.train.get_tensorboard_path()

    def get_tensorboard_writer(self) -> Any:
        """A `tensorboardX.SummaryWriter` on the trial's TensorBoard folder (one per process,
        made on first use)."""
        if self._tensorboard_writer is None:
            try:
                import tensorboardX
            except ImportError as error:
                raise ImportError(
                    "get_tensorboard_writer() needs tensorboardX: pip install 'determined-es[torch]'"
                ) from error
            self._tensorboard_writer = tensorboardX.SummaryWriter(str(self.get_tensorboard_path()))
        return self._tensorboard_writer

    def set_profiler(self, *args: Any, **kwargs: Any) -> None:
        """Profile training with `torch.profiler.profile(*args, **kwargs)`, traces written to
        the TensorBoard folder; the Trainer starts it and steps it every batch."""
        self.profiler = torch.profiler.profile(
            *args,
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.get_tensorboard_path())),
            **kwargs,
        )

    # -- devices ------------------------------------------------------------------------------

    def _choose_device(self) -> torch.device:
        """One GPU per worker (the worker's local rank among the node's), else the CPU."""
        if self._num_gpus <= 0:
            return torch.device("cpu")
        if not torch.cuda.is_available():
            logger.warning(
                "the trial has %d GPUs but torch sees no CUDA: training on the CPU", self._num_gpus
            )
            return torch.device("cpu")
        index = self.distributed.local_rank if self.distributed.size > 1 else 0
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
        return device

    def to_device(self, data: Any) -> Any:
        """`data` (tensors, possibly in dicts, lists and tuples) moved to the trial's device."""
        return to_device(data, self.device, self._to_device_warned_types)

    def autocast(self, dtype: torch.dtype | None = None, enabled: bool = True) -> torch.autocast:
        """`torch.autocast` for the trial's device: `with context.autocast(): loss = ...`."""
        return torch.autocast(device_type=self.device.type, dtype=dtype, enabled=enabled)

    # -- wrapping -----------------------------------------------------------------------------

    def wrap_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Register a model for checkpointing; when training, move it to the device and, with
        several workers in torch.distributed, wrap it in DistributedDataParallel.

        Use the returned model in `train_batch` and `evaluate_batch`.
        """
        if self._managed_training:
            model = model.to(self.device)
            if _torch_distributed_size() > 1:
                device_ids = [self.device.index] if self.device.type == "cuda" else None
                model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
        self.models.append(model)
        return model

    def wrap_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        backward_passes_per_step: int = 1,
        fp16_compression: bool = False,
        average_aggregated_gradients: bool = True,
    ) -> torch.optim.Optimizer:
        """Register an optimizer of the wrapped models' parameters; returned as it is.

        With `aggregation_frequency` N > 1, gradients summed over N batches are divided by N
        before the step unless `average_aggregated_gradients` is False. The other two
        arguments were for Horovod: DistributedDataParallel needs neither (both accepted).
        """
        if backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be at least 1, got {backward_passes_per_step}")
        if fp16_compression:
            logger.warning(
                "wrap_optimizer(fp16_compression=True) has no effect: gradients travel as they are"
            )
        if not average_aggregated_gradients:
            self._summed_gradients.append(optimizer)
        self.optimizers.append(optimizer)
        return optimizer

    def wrap_lr_scheduler(
        self, lr_scheduler: Any, step_mode: LRScheduler.StepMode, frequency: int = 1
    ) -> Any:
        """Register a torch LR scheduler of a wrapped optimizer; returned as it is. `step_mode`
        says who steps it (see `det.pytorch.LRScheduler`)."""
        if (
            isinstance(lr_scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
            and step_mode is not LRScheduler.StepMode.MANUAL_STEP
        ):
            raise ValueError(
                "ReduceLROnPlateau steps on a metric, so wrap it with step_mode=MANUAL_STEP and "
                "call its step(metric) yourself, e.g. from a PyTorchCallback's on_validation_end"
            )
        optimizer = getattr(lr_scheduler, "optimizer", None)
        if optimizer is not None and not any(optimizer is wrapped for wrapped in self.optimizers):
            raise ValueError("the LR scheduler's optimizer must be one returned by context.wrap_optimizer()")
        self.lr_schedulers.append(LRScheduler(lr_scheduler, step_mode, frequency))
        return lr_scheduler

    def wrap_scaler(self, scaler: Any) -> Any:
        """Register a `torch.amp.GradScaler` for checkpointing; returned as it is.

        Use it as in plain torch (as Determined does): `context.backward(scaler.scale(loss))`,
        `context.step_optimizer(optimizer, scaler=scaler)` (which unscales before `clip_grads`
        and steps through the scaler), then `scaler.update()`.
        """
        if any(scaler is wrapped for wrapped in self._scalers):
            raise ValueError("this gradient scaler is already wrapped; wrap each scaler once")
        self._scalers.append(scaler)
        return scaler

    def configure_apex_amp(self, *args: Any, **kwargs: Any) -> Any:
        """Not supported: NVIDIA Apex."""
        raise NotImplementedError(
            "determined-es does not support NVIDIA Apex (context.configure_apex_amp); use torch.amp: "
            "`with context.autocast():` around the forward pass and a torch.amp.GradScaler given to "
            "context.wrap_scaler()"
        )

    @overload
    def wrap_reducer(
        self, reducer: R, name: str | None = None, for_training: bool = True, for_validation: bool = True
    ) -> R: ...

    @overload
    def wrap_reducer(
        self,
        reducer: Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> _SimpleReducer: ...

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a metric computed over every worker's data; see
        `det.pytorch.MetricReducer`. A plain function of the list of values gets a reducer
        with an `update(value)` method."""
        return self._reducers.wrap_reducer(reducer, name, for_training, for_validation)

    # -- training steps -----------------------------------------------------------------------

    def _should_communicate_and_update(self) -> bool:
        """Whether this batch ends a gradient aggregation: the optimizers step (and, with
        DistributedDataParallel, gradients are averaged across workers) only then."""
        if not self._managed_training or self._aggregation_frequency == 1:
            return True
        return (self._batch_index() + 1) % self._aggregation_frequency == 0

    def backward(
        self,
        loss: torch.Tensor,
        gradient: torch.Tensor | None = None,
        retain_graph: bool = False,
        create_graph: bool = False,
    ) -> None:
        """`loss.backward(...)`; gradients accumulate over the batches of an aggregation, and
        workers exchange them only on its last batch."""
        with self._no_sync_unless_updating():
            torch.autograd.backward(loss, gradient, retain_graph=retain_graph, create_graph=create_graph)

    @contextlib.contextmanager
    def _no_sync_unless_updating(self) -> Iterator[None]:
        if self._should_communicate_and_update():
            yield
            return
        with contextlib.ExitStack() as stack:
            for model in self.models:
                if isinstance(model, torch.nn.parallel.DistributedDataParallel):
                    stack.enter_context(model.no_sync())
            yield

    def step_optimizer(
        self,
        optimizer: torch.optim.Optimizer,
        clip_grads: Callable[[list[torch.nn.Parameter]], Any] | None = None,
        auto_zero_grads: bool = True,
        scaler: Any = None,
    ) -> None:
        """Step `optimizer` at the end of each gradient aggregation (every batch by default):
        average the aggregated gradients, `clip_grads(parameters)` (after unscaling, with a
        `scaler`), step (through the scaler, if any), zero the gradients (`auto_zero_grads`),
        and step its STEP_EVERY_OPTIMIZER_STEP LR schedulers."""
        if not auto_zero_grads and self._aggregation_frequency > 1:
            raise ValueError(
                "step_optimizer(auto_zero_grads=False) cannot be used with aggregation_frequency > 1: "
                "the gradients must be zeroed after each aggregated step"
            )
        if not self._should_communicate_and_update():
            return
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if self._aggregation_frequency > 1 and not any(optimizer is o for o in self._summed_gradients):
            with torch.no_grad():
                for parameter in parameters:
                    if parameter.grad is not None:
                        parameter.grad.div_(self._aggregation_frequency)
        if clip_grads is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            clip_grads(parameters)
        if scaler is not None:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if auto_zero_grads:
            optimizer.zero_grad()
        self._step_lr_schedulers_of(optimizer)

    def _step_lr_schedulers_of(self, optimizer: torch.optim.Optimizer) -> None:
        for scheduler in self.lr_schedulers:
            if (
                scheduler._step_mode is LRScheduler.StepMode.STEP_EVERY_OPTIMIZER_STEP
                and getattr(scheduler._scheduler, "optimizer", None) is optimizer
                and (scheduler._frequency == 1 or self._optimizer_steps() % scheduler._frequency == 0)
            ):
                scheduler.step()

    def _optimizer_steps(self) -> int:
        """How many aggregated steps training has taken, this one included (derived from
        the batch index, so that it needs no checkpointing)."""
        return (self._batch_index() + 1) // self._aggregation_frequency


def _torch_distributed_size() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size()
    return 1
