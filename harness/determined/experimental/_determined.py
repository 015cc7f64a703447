"""`Determined`: the SDK's connection to one master, and what it finds there."""

from __future__ import annotations

import json
import os
import pathlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError, Gateway, master_address
from determined.common.states import ExperimentState
from determined.experimental._checkpoint import Checkpoint, OrderBy
from determined.experimental._experiment import (
    Experiment,
    ExperimentSortBy,
    experiments_request,
    get_experiment_message,
)
from determined.experimental._model import Model, ModelSortBy, get_model_message, sorted_models
from determined.experimental._trial import Trial, TrialMetrics, iter_trials_metrics
from determined.experimental._unsupported import NO_OAUTH, NO_WORKSPACES, refuse, unsupported_method
from determined.experimental._user import User, create_user, list_users, user_by_id, user_by_name, whoami

if TYPE_CHECKING:
    from determined.proto import api_pb2


class Determined:
    """A master, by address: `master` as `det -m` takes it (host:port, or a
    URL), else $DET_MASTER, else localhost:8080.

    Calls act as `user`, logged in at once with `password` (a cached token of
    the user's is used first, as `det -u` does; no password and no cached token:
    asked for on the terminal); with no `user`, as the CLI would act: $DET_USER
    with $DET_PASS, else the user of `det user login`, else `determined` with
    an empty password. Tokens are kept in the CLI's cache. `cert_path` and `cert_name`
    stand for $DET_MASTER_CERT_FILE and $DET_MASTER_CERT_NAME (a TLS master's certificate)."""

    def __init__(
        self,
        master: str | None = None,
        user: str | None = None,
        password: str | None = None,
        cert_path: str | None = None,
        cert_name: str | None = None,
        noverify: bool = False,
    ) -> None:
        if noverify:
            refuse("Determined(noverify=True)", "a TLS master's certificate is always checked")
        environ = dict(os.environ)
        environ.update({"DET_MASTER_CERT_FILE": cert_path} if cert_path else {})
        environ.update({"DET_MASTER_CERT_NAME": cert_name} if cert_name else {})
        self._gateway = Gateway(master_address(master), user, password, environ)
        if user is not None:
            self._gateway.session.token()

    def create_experiment(
        self,
        config: str | pathlib.Path | Mapping[str, Any],
        model_dir: str | pathlib.Path | None = None,
        includes: Iterable[str | pathlib.Path] | None = None,
    ) -> Experiment:
        """Creates and starts an experiment. `config`: a config file's path, or
        the config as a dict; `model_dir`: the folder uploaded as the trials'
        working directory (.detignore applies); `includes`: files or folders
        uploaded beside it, each under its own name."""
        from determined.cli._upload import upload_context
        from determined.cli.experiment import submit
        from determined.common import context

        config_yaml = _config_yaml(config)
        folder = pathlib.Path(model_dir) if model_dir is not None else None
        extra = [pathlib.Path(p) for p in includes or ()]
        context_hash = ""
        if folder is not None or extra:
            try:
                files = context.context_files(folder, includes=extra)
            except context.ContextError as problem:
                raise ValueError(str(problem)) from None
            context_hash = upload_context(self._gateway, files)
        created = submit(self._gateway, config_yaml, context_hash, activate=True)
        return self.get_experiment(created.experiment_id)

    def get_experiment(self, experiment_id: int) -> Experiment:
        return Experiment(self._gateway, get_experiment_message(self._gateway, experiment_id).experiment)

    def list_experiments(
        self,
        sort_by: ExperimentSortBy | None = None,
        order_by: OrderBy | str | None = None,
        experiment_ids: Iterable[int] | None = None,
        labels: Iterable[str] | None = None,
        users: Iterable[str] | None = None,
        states: Iterable[ExperimentState | str] | None = None,
        name: str | None = None,
        project_id: int | None = None,
    ) -> list[Experiment]:
        """Experiments (deleted ones left out, archived ones in), by id unless `sort_by`:
        those with every one of `labels`, of one of `users` and `states`, whose name contains
        `name`, and among `experiment_ids`."""

        if project_id is not None:
            refuse("list_experiments(project_id=...)", NO_WORKSPACES)
        request = experiments_request(sort_by, order_by, labels, users, states, name)
        response: api_pb2.GetExperimentsResponse = self._gateway.call(
            self._gateway.stub.GetExperiments, request
        )
        wanted = None if experiment_ids is None else set(experiment_ids)
        return [
            Experiment(self._gateway, e) for e in response.experiments if wanted is None or e.id in wanted
        ]

    def iter_trials_metrics(self, trial_ids: Iterable[int], group: str) -> Iterator[TrialMetrics]:
        """The metrics reports of these trials in `group` ("training", "validation", ...),
        trial by trial, each oldest first."""
        return iter_trials_metrics(self._gateway, list(trial_ids), group)

    # Determined's older names.
    stream_trials_metrics = iter_trials_metrics

    def stream_trials_training_metrics(self, trial_ids: Iterable[int]) -> Iterator[TrialMetrics]:
        return self.iter_trials_metrics(trial_ids, "training")

    def stream_trials_validation_metrics(self, trial_ids: Iterable[int]) -> Iterator[TrialMetrics]:
        return self.iter_trials_metrics(trial_ids, "validation")

    def whoami(self) -> User:
        return whoami(self._gateway)

    def get_session_username(self) -> str:
        return self.whoami().username

    def logout(self) -> None:
        """Ends this session at the master and forgets its token."""
        from determined.cli._auth import TokenStore
        from determined.cli.user import _end_session

        username = self.get_session_username()
        store = TokenStore(self._gateway.address)
        token = store.token(username)
        if token is not None:
            _end_session(self._gateway, token)
        store.forget(username)

    def list_users(self, active: bool | None = None) -> list[User]:
        return list_users(self._gateway, active)

    def get_user_by_name(self, user_name: str) -> User:
        return user_by_name(self._gateway, user_name)

    def get_user_by_id(self, user_id: int) -> User:
        return user_by_id(self._gateway, user_id)

    def create_user(
        self, username: str, admin: bool, password: str | None = None, remote: bool = False
    ) -> User:
        """A new user (an admin's call). ValueError when the password is missing or does not
        follow Determined's rules (8 characters or more, upper- and lower-case, a digit)."""
        if remote:
            refuse("create_user(remote=True)", "every user here logs in with a password")
        return create_user(self._gateway, username, admin, password)

    list_workspaces = unsupported_method("Determined.list_workspaces", NO_WORKSPACES)
    get_workspace = unsupported_method("Determined.get_workspace", NO_WORKSPACES)
    create_workspace = unsupported_method("Determined.create_workspace", NO_WORKSPACES)
    delete_workspace = unsupported_method("Determined.delete_workspace", NO_WORKSPACES)
    list_oauth_clients = unsupported_method("Determined.list_oauth_clients", NO_OAUTH)
    add_oauth_client = unsupported_method("Determined.add_oauth_client", NO_OAUTH)
    remove_oauth_client = unsupported_method("Determined.remove_oauth_client", NO_OAUTH)

    def get_trial(self, trial_id: int) -> Trial:
        from determined.proto import api_pb2

        response: api_pb2.GetTrialResponse = self._gateway.call(
            self._gateway.stub.GetTrial, api_pb2.GetTrialRequest(trial_id=trial_id)
        )
        return Trial(self._gateway, response.trial)

    def get_checkpoint(self, uuid: str) -> Checkpoint:
        from determined.cli.checkpoint import get_checkpoint

        return Checkpoint(self._gateway, get_checkpoint(self._gateway, uuid))

    def create_model(
        self,
        name: str,
        description: str = "",
        metadata: Mapping[str, Any] | None = None,
        labels: Iterable[str] | None = None,
    ) -> Model:
        from determined.proto import api_pb2

        request = api_pb2.CreateModelRequest(
            name=name,
            description=description,
            metadata_json=json.dumps(dict(metadata or {})),
            labels=list(labels or ()),
        )
        response: api_pb2.CreateModelResponse = self._gateway.call(self._gateway.stub.CreateModel, request)
        return Model(self._gateway, response.model)

    def get_model(self, identifier: str | int) -> Model:
        """A model by name, or by its id."""
        if isinstance(identifier, int):
            found = [m for m in self.list_models() if m.model_id == identifier]
            if not found:
                raise CliError(f"no model has id {identifier}", "NOT_FOUND")
            identifier = found[0].name
        return Model(self._gateway, get_model_message(self._gateway, identifier))

    def get_model_by_id(self, model_id: int) -> Model:
        """Determined's older name for get_model(model_id)."""
        return self.get_model(model_id)

    def list_models(
        self,
        sort_by: ModelSortBy = ModelSortBy.NAME,
        order_by: OrderBy | str = OrderBy.ASC,
        name: str | None = None,
        description: str | None = None,
        model_id: int | None = None,
        workspace_names: list[str] | None = None,
        workspace_ids: list[int] | None = None,
    ) -> list[Model]:
        """Models sorted as asked, those whose name and description contain `name` and
        `description` (and with id `model_id`)."""
        from determined.proto import api_pb2

        if workspace_names or workspace_ids:
            refuse("list_models(workspace_...)", NO_WORKSPACES)
        response: api_pb2.GetModelsResponse = self._gateway.call(
            self._gateway.stub.GetModels, api_pb2.GetModelsRequest()
        )
        models = [
            Model(self._gateway, m)
            for m in response.models
            if (name or "") in m.name
            and (description or "") in m.description
            and model_id in (None, m.model_id)
        ]
        return sorted_models(models, sort_by, order_by)

    # Determined's older name.
    get_models = list_models

    def get_model_labels(self) -> list[str]:
        """Every label of a model, the most used first."""
        counts = Counter(label for model in self.list_models() for label in model.labels)
        return [label for label, _ in counts.most_common()]


def _config_yaml(config: str | pathlib.Path | Mapping[str, Any]) -> str:
    """The config as the master takes it: a file's text, or a dict as YAML."""
    import yaml

    if isinstance(config, Mapping):
        return str(yaml.safe_dump(dict(config), sort_keys=False))
    path = pathlib.Path(config)
    if not path.is_file():
        raise FileNotFoundError(
            f"config file {path} {'is not a file' if path.exists() else 'does not exist'}"
        )
    return path.read_text(encoding="utf-8")
