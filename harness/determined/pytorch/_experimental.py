"""`context.experimental`: switches for the Trainer, and old names kept for existing code."""

import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from determined.pytorch._pytorch_context import PyTorchTrialContext


class PyTorchExperimentalContext:
    """Settings the Trainer reads: `_auto_to_device` (move each batch to the device before
    `train_batch`/`evaluate_batch`) and `_data_repro_checks_disabled`."""

    def __init__(self, parent: "PyTorchTrialContext") -> None:
        self._parent = parent
        self._auto_to_device = True
        self._data_repro_checks_disabled = False

    def disable_dataset_reproducibility_checks(self) -> None:
        """Allow data loaders other than `det.pytorch.DataLoader` without a warning; resuming
        mid-epoch with them is then your business."""
        self._data_repro_checks_disabled = True

    def disable_auto_to_device(self) -> None:
        """Hand batches to `train_batch`/`evaluate_batch` as the loader made them (e.g. to move
        only part of a batch, with `context.to_device()`)."""
        self._auto_to_device = False

    def use_amp(self) -> None:
        """Not supported: automatic mixed precision by rewriting the model's forward pass."""
        raise NotImplementedError(
            "determined-es does not support context.experimental.use_amp(); use torch.amp as "
            "Determined's manual AMP does: run the forward pass under `with context.autocast():`, "
            "wrap a torch.amp.GradScaler with context.wrap_scaler(), call "
            "context.backward(scaler.scale(loss)), context.step_optimizer(optimizer, "
            "scaler=scaler), then scaler.update()"
        )

    def wrap_reducer(self, *args: Any, **kwargs: Any) -> Any:
        """Old name of `context.wrap_reducer()`."""
        warnings.warn(
            "context.experimental.wrap_reducer() is deprecated; use context.wrap_reducer()",
            FutureWarning,
            stacklevel=2,
        )
        return self._parent.wrap_reducer(*args, **kwargs)

    def reset_reducers(self) -> None:
        """Old name: the Trainer resets the reducers itself before each period."""
        self._parent._reducers.reset_reducers()
