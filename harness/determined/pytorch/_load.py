"""`load_trial_from_checkpoint_path`: a trained trial back from a Trainer checkpoint, off-cluster."""

import importlib
import json
import pathlib
import sys
from typing import Any

import torch

from determined import core
from determined.core import _context as core_context
from determined.pytorch import _state
from determined.pytorch._pytorch_context import PyTorchTrialContext
from determined.pytorch._pytorch_trial import PyTorchTrial


class CheckpointLoadContext(PyTorchTrialContext):
    """The context a loaded trial gets: one process, no cluster, the checkpoint's
    hyperparameters and config; reports go to the log and nothing is checkpointed."""

    def __init__(self, hparams: dict[str, Any] | None, exp_conf: dict[str, Any] | None) -> None:
        super().__init__(
            core_context._dummy_context(None, core.DummyDistributedContext(), None),
            trial_seed=0,
            hparams=hparams,
            slots_per_trial=1,
            num_gpus=torch.cuda.device_count() if torch.cuda.is_available() else 0,
            exp_conf=exp_conf,
            aggregation_frequency=1,
            steps_completed=0,
            managed_training=False,
            debug_enabled=False,
            enable_tensorboard_logging=False,
        )


def load_trial_from_checkpoint_path(
    path: str | pathlib.Path,
    trial_class: type[PyTorchTrial] | None = None,
    trial_kwargs: dict[str, Any] | None = None,
    torch_load_kwargs: dict[str, Any] | None = None,
) -> PyTorchTrial:
    """The trial of a Trainer checkpoint (a local directory) with its trained weights.

    The trial class is imported from the checkpoint's copy of the code (`code/`) unless
    `trial_class` is given; it is built with a CheckpointLoadContext holding the stored
    hyperparameters (and `trial_kwargs`), then its wrapped models get the checkpoint's
    weights. `torch_load_kwargs` go to `torch.load` (default: onto the CPU)."""
    path = pathlib.Path(path)
    load_data_file = path / _state.LOAD_DATA_FILE
    if not load_data_file.is_file():
        raise FileNotFoundError(
            f"{path} is not a PyTorchTrial checkpoint made by the Trainer: it has no {_state.LOAD_DATA_FILE}"
        )
    load_data: dict[str, Any] = json.loads(load_data_file.read_text())
    if trial_class is None:
        trial_class = _import_trial_class(path / _state.CODE_FOLDER, load_data["trial_cls_spec"])
    context = CheckpointLoadContext(load_data.get("hparams"), load_data.get("experiment_config"))
    trial = trial_class(context, **(trial_kwargs or {}))
    _state.load_models(context, _state.read_state(path, **(torch_load_kwargs or {})))
    return trial


def _import_trial_class(code: pathlib.Path, spec: str) -> type[PyTorchTrial]:
    """`module:Qualname`, importable from the checkpoint's code (searched first)."""
    module_name, _, qualname = spec.partition(":")
    if str(code) not in sys.path and code.is_dir():
        sys.path.insert(0, str(code))
    found: Any = importlib.import_module(module_name)
    for name in qualname.split("."):
        found = getattr(found, name)
    if not (isinstance(found, type) and issubclass(found, PyTorchTrial)):
        raise TypeError(f"{spec} in the checkpoint is not a PyTorchTrial subclass")
    return found
