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

import functools
import inspect
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

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
from determined.experimental._experiment import Experiment, ExperimentSortBy
from determined.experimental._model import Model, ModelOrderBy, ModelSortBy, ModelVersion
from determined.experimental._trial import (
    LogLevel,
    TrainingMetrics,
    Trial,
    TrialMetrics,
    TrialSortBy,
    ValidationMetrics,
)
from determined.experimental._unsupported import (
    NO_OAUTH,
    NO_RESOURCE_POOL_API,
    NO_WORKSPACES,
    UnsupportedError,
    unsupported_class,
)
from determined.experimental._user import User

# Determined's other names for OrderBy.
CheckpointOrderBy = OrderBy
ExperimentOrderBy = OrderBy
TrialOrderBy = OrderBy

Project = unsupported_class("Project", NO_WORKSPACES)
Workspace = unsupported_class("Workspace", NO_WORKSPACES)
ResourcePool = unsupported_class("ResourcePool", NO_RESOURCE_POOL_API)
Oauth2ScimClient = unsupported_class("Oauth2ScimClient", NO_OAUTH)

__all__ = [
    "APIError",
    "Checkpoint",
    "CheckpointOrderBy",
    "CheckpointSortBy",
    "CheckpointState",
    "CheckpointTraining",
    "Determined",
    "DownloadMode",
    "Experiment",
    "ExperimentOrderBy",
    "ExperimentSortBy",
    "ExperimentState",
    "LogLevel",
    "Model",
    "ModelOrderBy",
    "ModelSortBy",
    "ModelVersion",
    "Oauth2ScimClient",
    "OrderBy",
    "Project",
    "ResourcePool",
    "TrainingMetrics",
    "Trial",
    "TrialMetrics",
    "TrialOrderBy",
    "TrialSortBy",
    "TrialState",
    "UnsupportedError",
    "User",
    "ValidationMetrics",
    "Workspace",
    "add_oauth_client",
    "create_experiment",
    "create_model",
    "create_user",
    "create_workspace",
    "delete_workspace",
    "get_checkpoint",
    "get_experiment",
    "get_model",
    "get_model_by_id",
    "get_model_labels",
    "get_models",
    "get_session_username",
    "get_trial",
    "get_user_by_id",
    "get_user_by_name",
    "get_workspace",
    "iter_trials_metrics",
    "list_experiments",
    "list_models",
    "list_oauth_clients",
    "list_users",
    "list_workspaces",
    "login",
    "logout",
    "remove_oauth_client",
    "stream_trials_metrics",
    "stream_trials_training_metrics",
    "stream_trials_validation_metrics",
    "whoami",
]

P = ParamSpec("P")
R = TypeVar("R")

_determined: Determined | None = None


def login(
    master: str | None = None,
    user: str | None = None,
    password: str | None = None,
    cert_path: str | None = None,
    cert_name: str | None = None,
    noverify: bool = False,
) -> None:
    """Points the module-level functions at `master`, acting as `user` (see
    Determined for the address forms, and for who acts when `user` is None);
    a wrong password raises APIError at once."""
    global _determined
    _determined = Determined(master, user, password, cert_path, cert_name, noverify)


def _connection() -> Determined:
    global _determined
    if _determined is None:
        _determined = Determined()
    return _determined


def _module_level(method: Callable[Concatenate[Determined, P], R]) -> Callable[P, R]:
    """`method` of the module's Determined connection, as a module-level function."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        return method(_connection(), *args, **kwargs)

    signature = inspect.signature(method)
    call.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
    return call


create_experiment = _module_level(Determined.create_experiment)
get_experiment = _module_level(Determined.get_experiment)
list_experiments = _module_level(Determined.list_experiments)
get_trial = _module_level(Determined.get_trial)
get_checkpoint = _module_level(Determined.get_checkpoint)
create_model = _module_level(Determined.create_model)
get_model = _module_level(Determined.get_model)
get_model_by_id = _module_level(Determined.get_model_by_id)
list_models = _module_level(Determined.list_models)
get_models = list_models
get_model_labels = _module_level(Determined.get_model_labels)
iter_trials_metrics = _module_level(Determined.iter_trials_metrics)
stream_trials_metrics = iter_trials_metrics
stream_trials_training_metrics = _module_level(Determined.stream_trials_training_metrics)
stream_trials_validation_metrics = _module_level(Determined.stream_trials_validation_metrics)
whoami = _module_level(Determined.whoami)
get_session_username = _module_level(Determined.get_session_username)
list_users = _module_level(Determined.list_users)
get_user_by_name = _module_level(Determined.get_user_by_name)
get_user_by_id = _module_level(Determined.get_user_by_id)
create_user = _module_level(Determined.create_user)
list_workspaces = _module_level(Determined.list_workspaces)
get_workspace = _module_level(Determined.get_workspace)
create_workspace = _module_level(Determined.create_workspace)
delete_workspace = _module_level(Determined.delete_workspace)
list_oauth_clients = _module_level(Determined.list_oauth_clients)
add_oauth_client = _module_level(Determined.add_oauth_client)
remove_oauth_client = _module_level(Determined.remove_oauth_client)


def logout() -> None:
    """Ends the module's session (if it has one) at the master and forgets its token."""
    global _determined
    if _determined is not None:
        _determined.logout()
        _determined = None
