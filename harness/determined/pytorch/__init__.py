"""Determined's PyTorch API: `PyTorchTrial`, its context, and the Trainer that runs it.

`import determined.pytorch` imports torch; `import determined` alone does not.
"""

from determined.pytorch import samplers
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._data import DataLoader, TorchData, adapt_batch_sampler, data_length, to_device
from determined.pytorch._experimental import PyTorchExperimentalContext
from determined.pytorch._load import CheckpointLoadContext, load_trial_from_checkpoint_path
from determined.pytorch._lr_scheduler import LRScheduler
from determined.pytorch._pytorch_context import PyTorchTrialContext
from determined.pytorch._pytorch_trial import PyTorchTrial
from determined.pytorch._reducer import MetricReducer, Reducer
from determined.pytorch._trainer import Trainer, init
from determined.pytorch._units import Batch, Epoch, Record, TrainUnit

__all__ = [
    "Batch",
    "CheckpointLoadContext",
    "DataLoader",
    "Epoch",
    "LRScheduler",
    "MetricReducer",
    "PyTorchCallback",
    "PyTorchExperimentalContext",
    "PyTorchTrial",
    "PyTorchTrialContext",
    "Record",
    "Reducer",
    "TorchData",
    "TrainUnit",
    "Trainer",
    "adapt_batch_sampler",
    "data_length",
    "init",
    "load_trial_from_checkpoint_path",
    "samplers",
    "to_device",
]
