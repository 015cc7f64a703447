"""`Determined`: the SDK's connection to one master, and what it finds there."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError, Gateway, master_address
from determined.experimental._checkpoint import Checkpoint
from determined.experimental._experiment import Experiment, get_experiment_message
from determined.experimental._model import Model, get_model_message
from determined.experimental._trial import Trial

if TYPE_CHECKING:
    from determined.proto import api_pb2


class Determined:
    """A master, by address: `master` as `det -m` takes it (host:port, or a
    URL), else $DET_MASTER, else localhost:8080.

    Calls act as `user`, logged in at once with `password` (a cached token of
    the user's is used first, as `det -u` does; no password and no cached token:
    asked for on the terminal); with no `user`, as the CLI would act: $DET_USER
    with $DET_PASS, else the user of `det user login`, else `determined` with
    an empty password. Tokens are kept in the CLI's cache."""

    def __init__(
        self, master: str | None = None, user: str | None = None, password: str | None = None
    ) -> None:
        self._gateway = Gateway(master_address(master), user, password)
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

    def list_experiments(self) -> list[Experiment]:
        """Every experiment (deleted ones left out), oldest first."""
        from determined.proto import api_pb2

        response: api_pb2.GetExperimentsResponse = self._gateway.call(
            self._gateway.stub.GetExperiments, api_pb2.GetExperimentsRequest()
        )
        return sorted((Experiment(self._gateway, e) for e in response.experiments), key=lambda e: e.id)

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

    def list_models(self) -> list[Model]:
        from determined.proto import api_pb2

        response: api_pb2.GetModelsResponse = self._gateway.call(
            self._gateway.stub.GetModels, api_pb2.GetModelsRequest()
        )
        return [Model(self._gateway, m) for m in response.models]


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
