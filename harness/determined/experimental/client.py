"""The Python SDK, as Determined users write it:

    from determined.experimental import client

    client.login(master="localhost:8080", user="alice", password="...")  # optional: as `det` otherwise
    exp = client.create_experiment("const.yaml", model_dir=".")
    exp.wait()
    best = exp.top_checkpoint()
    path = best.download()                           # checkpoints/<uuid>

The module-level functions use one `Determined` connection: the one `login()`
made, else one to $DET_MASTER (or localhost:8080) made on first use. A call the
master refuses, or a master that cannot be reached, raises `APIError`; its
`code` names the status ("NOT_FOUND", "INVALID_ARGUMENT", "UNAVAILABLE", ...).

Importing this module loads no grpc, torch, SQLAlchemy or the services: the
connection is made on first use.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Mapping
from typing import Any

from determined.cli._client import CliError as APIError
from determined.cli._download import DownloadMode
from determined.common.states import CheckpointState, ExperimentState, TrialState
from determined.experimental._checkpoint import (
    Checkpoint,
    CheckpointSortBy,
    CheckpointTraining,
    OrderBy,
)
from determined.experimental._determined import Determined
from determined.experimental._experiment import Experiment
from determined.experimental._model import Model, ModelVersion
from determined.experimental._trial import Trial, TrialMetrics

__all__ = [
    "APIError",
    "Checkpoint",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTraining",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentState",
    "Model",
    "ModelVersion",
    "OrderBy",
    "Trial",
    "TrialMetrics",
    "TrialState",
    "create_experiment",
    "create_model",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_trial",
    "list_experiments",
    "list_models",
    "login",
]

_determined: Determined | None = None


def login(master: str | None = None, user: str | None = None, password: str | None = None) -> None:
    """Points the module-level functions at `master`, acting as `user` (see
    Determined for the address forms, and for who acts when `user` is None);
    a wrong password raises APIError at once."""
    global _determined
    _determined = Determined(master, user, password)


def _connection() -> Determined:
    global _determined
    if _determined is None:
        _determined = Determined()
    return _determined


def create_experiment(
    config: str | pathlib.Path | Mapping[str, Any],
    model_dir: str | pathlib.Path | None = None,
    includes: Iterable[str | pathlib.Path] | None = None,
) -> Experiment:
    return _connection().create_experiment(config, model_dir, includes)


def get_experiment(experiment_id: int) -> Experiment:
    return _connection().get_experiment(experiment_id)


def list_experiments() -> list[Experiment]:
    return _connection().list_experiments()


def get_trial(trial_id: int) -> Trial:
    return _connection().get_trial(trial_id)


def get_checkpoint(uuid: str) -> Checkpoint:
    return _connection().get_checkpoint(uuid)


def create_model(
    name: str,
    description: str = "",
    metadata: Mapping[str, Any] | None = None,
    labels: Iterable[str] | None = None,
) -> Model:
    return _connection().create_model(name, description, metadata, labels)


def get_model(identifier: str | int) -> Model:
    return _connection().get_model(identifier)


def list_models() -> list[Model]:
    return _connection().list_models()
