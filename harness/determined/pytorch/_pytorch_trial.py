"""`PyTorchTrial`: the model code the Trainer (and a `model_def:Trial` entrypoint) runs."""

import abc
from typing import Any

import torch

from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._data import DataLoader, data_length
from determined.pytorch._pytorch_context import PyTorchTrialContext
from determined.pytorch._reducer import Reducer


class PyTorchTrial(abc.ABC):
    """Subclass it: build and wrap the models, optimizers and LR schedulers in `__init__`
    (with `context.wrap_*`), give the data loaders, and say what one training batch does
    (`train_batch`, using `context.backward()` and `context.step_optimizer()`) and how to
    validate: override exactly one of `evaluate_batch` (per batch, reduced across batches
    and workers by `evaluation_reducer()`) and `evaluate_full_dataset` (the whole validation
    set, on the chief only).
    """

    trial_context_class = PyTorchTrialContext

    @abc.abstractmethod
    def __init__(self, context: PyTorchTrialContext) -> None:
        """Keep the context; build and wrap what the trial trains."""

    @abc.abstractmethod
    def build_training_data_loader(self) -> DataLoader | torch.utils.data.DataLoader[Any]:
        """The training data: a `det.pytorch.DataLoader` (sharded by worker, resumable
        mid-epoch); a plain torch DataLoader works too, without either."""

    @abc.abstractmethod
    def build_validation_data_loader(self) -> DataLoader | torch.utils.data.DataLoader[Any]:
        """The validation data."""

    @abc.abstractmethod
    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> torch.Tensor | dict[str, Any]:
        """Train on one batch; return its metrics (a dict) or just the loss (a tensor,
        reported as `loss`)."""

    def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        """The metrics of one validation batch: numbers or one-element tensors."""
        raise NotImplementedError(f"{type(self).__name__} does not override evaluate_batch()")

    def evaluate_full_dataset(self, data_loader: torch.utils.data.DataLoader[Any]) -> dict[str, Any]:
        """The validation metrics of the whole validation set (run on the chief only)."""
        raise NotImplementedError(f"{type(self).__name__} does not override evaluate_full_dataset()")

    def build_callbacks(self) -> dict[str, PyTorchCallback]:
        """Callbacks by name; the name keys each callback's state in checkpoints."""
        return {}

    def evaluation_reducer(self) -> Reducer | dict[str, Reducer]:
        """How `evaluate_batch`'s metrics combine over batches and workers: one Reducer for
        all, or one per metric name."""
        return Reducer.AVG

    def get_batch_length(self, batch: Any) -> int:
        """The number of records in a batch (for `Record` lengths); by default the length of
        its first tensor."""
        return data_length(batch)
