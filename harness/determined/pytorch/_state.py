"""What a Trainer checkpoint holds, and putting it back.

`state_dict.pth` holds the wrapped models, optimizers, LR schedulers and gradient scalers,
the callbacks' own state, every rank's random number generators and the batches trained: all
that resuming needs to continue exactly as an uninterrupted run would. Beside it,
`load_data.json` says how to rebuild the trial (`load_trial_from_checkpoint_path`) and
`code/` keeps a copy of the code that trained it.
"""

import json
import logging
import os
import pathlib
import random
import shutil
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from determined.common import context as context_folder
from determined.pytorch._callback import PyTorchCallback
from determined.pytorch._pytorch_context import PyTorchTrialContext

logger = logging.getLogger("determined.pytorch")

STATE_FILE = "state_dict.pth"
LOAD_DATA_FILE = "load_data.json"
CODE_FOLDER = "code"
# More files and folders than this is not a code folder: it is not copied into checkpoints.
MAX_CODE_ENTRIES = 10_000


def rng_state() -> dict[str, Any]:
    """This process's generators: Python's, NumPy's global one, torch's CPU one and CUDA's."""
    state: dict[str, Any] = {
        "random": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.random.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["random"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a DistributedDataParallel wrapper: its state_dict has no `module.`
    prefix, so a checkpoint loads the same with or without torch.distributed."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        inner: torch.nn.Module = model.module
        return inner
    return model


def trainer_state(
    context: PyTorchTrialContext,
    callbacks: Mapping[str, PyTorchCallback],
    batches_trained: int,
    rng_states: list[dict[str, Any]],
) -> dict[str, Any]:
    """The content of `state_dict.pth`; `rng_states` has one entry per rank, in rank order."""
    return {
        "models_state_dict": [unwrapped(model).state_dict() for model in context.models],
        "optimizers_state_dict": [optimizer.state_dict() for optimizer in context.optimizers],
        "lr_schedulers_state_dict": [scheduler.state_dict() for scheduler in context.lr_schedulers],
        "scalers_state_dict": [scaler.state_dict() for scaler in context._scalers],
        "callbacks": {name: callback.state_dict() for name, callback in callbacks.items()},
        "rng_states": rng_states,
        "batches_trained": batches_trained,
    }


def load_models(context: PyTorchTrialContext, state: Mapping[str, Any]) -> None:
    models = state["models_state_dict"]
    _check_count("models", len(models), len(context.models), "wrap_model")
    for model, model_state in zip(context.models, models, strict=True):
        unwrapped(model).load_state_dict(model_state)


def restore(
    context: PyTorchTrialContext,
    callbacks: Mapping[str, PyTorchCallback],
    state: Mapping[str, Any],
    rank: int,
) -> int:
    """Put `state` (a `trainer_state`) back; the batches it had trained. The random number
    generators go last: nothing after them may draw before training resumes."""
    load_models(context, state)
    optimizers = state["optimizers_state_dict"]
    _check_count("optimizers", len(optimizers), len(context.optimizers), "wrap_optimizer")
    for optimizer, optimizer_state in zip(context.optimizers, optimizers, strict=True):
        optimizer.load_state_dict(optimizer_state)
    schedulers = state["lr_schedulers_state_dict"]
    _check_count("LR schedulers", len(schedulers), len(context.lr_schedulers), "wrap_lr_scheduler")
    for scheduler, scheduler_state in zip(context.lr_schedulers, schedulers, strict=True):
        scheduler.load_state_dict(scheduler_state)
    scalers = state["scalers_state_dict"]
    _check_count("gradient scalers", len(scalers), len(context._scalers), "wrap_scaler")
    for scaler, scaler_state in zip(context._scalers, scalers, strict=True):
        scaler.load_state_dict(scaler_state)
    for name, callback in callbacks.items():
        if name in state["callbacks"]:
            callback.load_state_dict(state["callbacks"][name])
        else:
            logger.warning("callback %r has no state in the checkpoint: it starts afresh", name)
    rng_states = state["rng_states"]
    if rank < len(rng_states):
        set_rng_state(rng_states[rank])
    else:
        logger.warning(
            "the checkpoint has random number generator states for %d ranks, none for rank %d: "
            "this rank's generators are not restored",
            len(rng_states),
            rank,
        )
    batches_trained: int = state["batches_trained"]
    return batches_trained


def _check_count(what: str, stored: int, wrapped: int, method: str) -> None:
    if stored != wrapped:
        raise ValueError(
            f"the checkpoint holds {stored} {what} but the trial wrapped {wrapped} with context.{method}(): "
            "the trial must wrap the same objects, in the same order, as the one that saved it"
        )


def load_data(
    trial: object, experiment_config: Mapping[str, Any] | None, hparams: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The content of `load_data.json`: what rebuilding the trial needs."""
    trial_class = type(trial)
    return {
        "trial_type": "PyTorchTrial",
        "experiment_config": dict(experiment_config or {}),
        "hparams": dict(hparams or {}),
        "trial_cls_spec": f"{trial_class.__module__}:{trial_class.__qualname__}",
        "is_trainer": True,
    }


def code_files(folder: pathlib.Path, storage_root: pathlib.Path) -> list[tuple[pathlib.Path, str]]:
    """The files of `folder` a checkpoint copies under `code/`: the context directory's
    files (`.detignore` honoured), less any checkpoint storage inside it. None (with a
    warning) when the folder is too large for a context, or holds so many files that it is
    not a code folder (a script run from the home directory or /tmp, say)."""
    if _more_entries_than(folder, MAX_CODE_ENTRIES):
        logger.warning(
            "checkpoints will not hold a copy of the code in %s: it holds more than %d files and folders "
            "(list what is not code in a %s file there)",
            folder,
            MAX_CODE_ENTRIES,
            context_folder.DETIGNORE,
        )
        return []
    try:
        entries = context_folder.context_files(folder).entries
    except context_folder.ContextError as error:
        logger.warning("checkpoints will not hold a copy of the code in %s: %s", folder, error)
        return []
    storage_root = storage_root.resolve()
    return [
        (entry.path, entry.name)
        for entry in entries
        if not entry.is_dir and not entry.path.resolve().is_relative_to(storage_root)
    ]


def _more_entries_than(folder: pathlib.Path, limit: int) -> bool:
    """Whether `folder` holds more than `limit` entries that are not ignored; stops counting
    there, so that a huge folder costs no more than a small one."""
    spec = context_folder._ignore_spec(folder)
    count = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        relative = pathlib.Path(dirpath).relative_to(folder).as_posix()
        prefix = "" if relative == "." else relative + "/"
        dirnames[:] = [name for name in dirnames if not spec.match_file(f"{prefix}{name}/")]
        count += len(dirnames) + len(filenames)
        if count > limit:
            return True
    return False


def write_checkpoint(
    path: pathlib.Path,
    state: dict[str, Any],
    load_data: dict[str, Any],
    code: list[tuple[pathlib.Path, str]],
) -> None:
    torch.save(state, path / STATE_FILE)
    (path / LOAD_DATA_FILE).write_text(json.dumps(load_data, indent=2))
    for source, name in code:
        target = path / CODE_FOLDER / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def read_state(path: pathlib.Path, **torch_load_kwargs: Any) -> dict[str, Any]:
    """A checkpoint's `state_dict.pth`, on the CPU unless told otherwise. The file holds more
    than tensors (generator states, callbacks' state): it is unpickled whole, which trusts it,
    as a checkpoint's own code is trusted when it is loaded."""
    kwargs: dict[str, Any] = {"map_location": "cpu", "weights_only": False, **torch_load_kwargs}
    state: dict[str, Any] = torch.load(path / STATE_FILE, **kwargs)
    return state
