"""Experiments in the SDK: their lifecycle, trials and checkpoints."""

from __future__ import annotations

import enum
import functools
import json
import pathlib
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from determined.common.states import ExperimentState, is_ended
from determined.experimental._checkpoint import Checkpoint, CheckpointSortBy, OrderBy, list_checkpoints
from determined.experimental._trial import Trial, TrialSortBy, sorted_trials
from determined.experimental._unsupported import NO_PACHYDERM, NO_WORKSPACES, unsupported_method

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.proto import api_pb2


class ExperimentSortBy(enum.Enum):
    """What list_experiments sorts by (Determined's members; the value is GetExperimentsRequest's
    sort_by). The master refuses those it cannot sort by."""

    ID = "id"
    DESCRIPTION = "description"
    START_TIME = "start_time"
    END_TIME = "end_time"
    STATE = "state"
    NUM_TRIALS = "num_trials"
    PROGRESS = "progress"
    USER = "user"
    NAME = "name"
    FORKED_FROM = "forked_from"
    RESOURCE_POOL = "resource_pool"
    PROJECT_ID = "project_id"
    CHECKPOINT_SIZE = "checkpoint_size"
    CHECKPOINT_COUNT = "checkpoint_count"
    SEARCHER_METRIC_VAL = "searcher_metric_val"


def experiments_request(
    sort_by: ExperimentSortBy | None,
    order_by: OrderBy | str | None,
    labels: Iterable[str] | None,
    users: Iterable[str] | None,
    states: Iterable[ExperimentState | str] | None,
    name: str | None,
) -> api_pb2.GetExperimentsRequest:
    """The GetExperimentsRequest of list_experiments' filters and sort (every experiment,
    archived ones too, as Determined's SDK lists them)."""
    from determined.proto import api_pb2

    order = OrderBy(order_by.lower()) if isinstance(order_by, str) else order_by
    return api_pb2.GetExperimentsRequest(
        name=name or "",
        labels=list(labels or ()),
        users=list(users or ()),
        states=[ExperimentState(s).value for s in states or ()],
        sort_by=ExperimentSortBy(sort_by).value if sort_by is not None else "",
        descending=order is OrderBy.DESC,
    )


def get_experiment_message(gateway: Gateway, experiment_id: int) -> api_pb2.GetExperimentResponse:
    from determined.proto import api_pb2

    response: api_pb2.GetExperimentResponse = gateway.call(
        gateway.stub.GetExperiment, api_pb2.GetExperimentRequest(experiment_id=experiment_id)
    )
    return response


def top_order(
    gateway: Gateway, experiment_id: int, sort_by: str | None, smaller_is_better: bool | None
) -> OrderBy | None:
    """The order that puts the best first for top_checkpoint: none for the
    searcher metric (the master knows which way is better), else ascending
    when smaller is better (by default, as for the experiment's searcher)."""
    if sort_by is None:
        return None
    if smaller_is_better is None:
        from determined.common.expconf import SearcherConfig

        config = json.loads(get_experiment_message(gateway, experiment_id).experiment.config_json or "{}")
        default = SearcherConfig.model_fields["smaller_is_better"].default
        smaller_is_better = bool(config.get("searcher", {}).get("smaller_is_better", default))
    return OrderBy.ASC if smaller_is_better else OrderBy.DESC


class Experiment:
    """One experiment. Its attributes are as the master knew them when it was
    fetched; `reload()` fetches them again."""

    def __init__(self, gateway: Gateway, message: api_pb2.Experiment) -> None:
        self._gateway = gateway
        self._message = message

    def __repr__(self) -> str:
        return f"Experiment(id={self.id}, state={self.state.value})"

    @property
    def id(self) -> int:
        return self._message.id

    @property
    def name(self) -> str:
        return self._message.name

    @property
    def state(self) -> ExperimentState:
        return ExperimentState(self._message.state)

    @property
    def progress(self) -> float:
        return self._message.progress

    @property
    def labels(self) -> set[str]:
        return set(self._message.labels)

    @property
    def description(self) -> str:
        return self._message.description

    @property
    def notes(self) -> str:
        return self._message.notes

    @property
    def archived(self) -> bool:
        return self._message.archived

    @property
    def parent_id(self) -> int | None:
        """The experiment it was forked from, if any."""
        return self._message.parent_id or None

    @property
    def unmanaged(self) -> bool:
        """A detached run (core_v2), which the cluster does not launch."""
        return self._message.unmanaged

    @property
    def project_id(self) -> None:
        """Always None: this cluster has no projects."""
        return None

    @property
    def workspace_id(self) -> None:
        """Always None: this cluster has no workspaces."""
        return None

    @property
    def config(self) -> dict[str, Any]:
        """The stored config, every default filled in."""
        return dict(json.loads(self._message.config_json)) if self._message.config_json else {}

    def get_config(self) -> dict[str, Any]:
        """The stored config, fetched again (every default filled in)."""
        self.reload()
        return self.config

    def reload(self) -> None:
        self._message = get_experiment_message(self._gateway, self.id).experiment

    def activate(self) -> None:
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.ActivateExperiment, api_pb2.ActivateExperimentRequest(experiment_id=self.id)
        )

    def pause(self) -> None:
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.PauseExperiment, api_pb2.PauseExperimentRequest(experiment_id=self.id)
        )

    def kill(self) -> None:
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.KillExperiment, api_pb2.KillExperimentRequest(experiment_id=self.id)
        )

    def delete(self) -> None:
        """Deletes an ended experiment: every checkpoint of it, then the
        experiment from listings (asynchronously: DELETING, then DELETED)."""
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.DeleteExperiment, api_pb2.DeleteExperimentRequest(experiment_id=self.id)
        )

    def wait(self, interval: float = 5.0) -> ExperimentState:
        """Polls every `interval` seconds until the experiment has ended
        (COMPLETED, CANCELED, ERROR, or being deleted); returns that state."""
        while True:
            self.reload()
            if is_ended(self.state):
                return self.state
            time.sleep(interval)

    def cancel(self) -> None:
        """Stops it as a user's cancel does: its trials checkpoint and stop, and it ends CANCELED."""
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.CancelExperiment, api_pb2.CancelExperimentRequest(experiment_id=self.id)
        )

    def archive(self) -> None:
        """Hides the ended experiment from listings (`det e list --all` still shows it)."""
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.ArchiveExperiment, api_pb2.ArchiveExperimentRequest(experiment_id=self.id)
        )
        self._message.archived = True

    def unarchive(self) -> None:
        from determined.proto import api_pb2

        self._gateway.call(
            self._gateway.stub.UnarchiveExperiment, api_pb2.UnarchiveExperimentRequest(experiment_id=self.id)
        )
        self._message.archived = False

    def set_name(self, name: str) -> None:
        self._patch(name=name)

    def set_description(self, description: str) -> None:
        self._patch(description=description)

    def set_notes(self, notes: str) -> None:
        self._patch(notes=notes)

    def set_labels(self, labels: Iterable[str]) -> None:
        """Its labels become exactly these."""
        from determined.proto import events_pb2

        self._patch(labels=events_pb2.ExperimentLabels(labels=sorted(set(labels))))

    def add_label(self, label: str) -> None:
        from determined.proto import api_pb2

        response: api_pb2.PutExperimentLabelResponse = self._gateway.call(
            self._gateway.stub.PutExperimentLabel,
            api_pb2.PutExperimentLabelRequest(experiment_id=self.id, label=label),
        )
        self._message.labels[:] = response.labels

    def remove_label(self, label: str) -> None:
        from determined.proto import api_pb2

        response: api_pb2.DeleteExperimentLabelResponse = self._gateway.call(
            self._gateway.stub.DeleteExperimentLabel,
            api_pb2.DeleteExperimentLabelRequest(experiment_id=self.id, label=label),
        )
        self._message.labels[:] = response.labels

    def _patch(self, **fields: Any) -> None:
        from determined.proto import api_pb2

        response: api_pb2.PatchExperimentResponse = self._gateway.call(
            self._gateway.stub.PatchExperiment,
            api_pb2.PatchExperimentRequest(experiment_id=self.id, **fields),
        )
        self._message = response.experiment

    def download_code(self, output_dir: str | pathlib.Path | None = None) -> str:
        """Saves its model definition (the context it was created with) as
        `exp-<id>_model_def.tar.gz` in `output_dir` (created if needed; default: the working
        directory), as Determined does; returns the archive's path."""
        from determined.cli._model_def import model_def_archive

        folder = pathlib.Path(output_dir).expanduser() if output_dir is not None else pathlib.Path()
        archive = model_def_archive(self._gateway, self.id)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"exp-{self.id}_model_def.tar.gz"
        path.write_bytes(archive)
        return str(path)

    def list_trials(
        self, sort_by: TrialSortBy = TrialSortBy.ID, order_by: OrderBy | str = OrderBy.ASC
    ) -> list[Trial]:
        """Its trials, sorted (by id by default)."""
        from determined.proto import api_pb2

        response: api_pb2.GetExperimentTrialsResponse = self._gateway.call(
            self._gateway.stub.GetExperimentTrials, api_pb2.GetExperimentTrialsRequest(experiment_id=self.id)
        )
        trials = [Trial(self._gateway, t) for t in response.trials]
        return sorted_trials(trials, sort_by, order_by, self._message.searcher_metric)

    def iter_trials(
        self,
        sort_by: TrialSortBy = TrialSortBy.ID,
        order_by: OrderBy | str = OrderBy.ASC,
        limit: int | None = None,
    ) -> Iterator[Trial]:
        """Its trials, sorted, at most `limit` of them."""
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be 1 or more, not {limit}")
        yield from self.list_trials(sort_by, order_by)[:limit]

    # Determined's older name.
    get_trials = list_trials

    move_to_project = unsupported_method("Experiment.move_to_project", NO_WORKSPACES)
    get_pachyderm_config = unsupported_method("Experiment.get_pachyderm_config", NO_PACHYDERM)
    delete_tensorboard_files = unsupported_method(
        "Experiment.delete_tensorboard_files", "TensorBoard reads the trials' metrics, it keeps no files"
    )

    def await_first_trial(self, interval: float = 0.1) -> Trial:
        """The experiment's first trial, once the searcher has created it.
        RuntimeError when the experiment ends before it has any."""
        while True:
            response = get_experiment_message(self._gateway, self.id)
            self._message = response.experiment
            if response.trials:
                return Trial(self._gateway, min(response.trials, key=lambda t: t.id))
            if is_ended(self.state):
                reason = f": {self._message.end_reason}" if self._message.end_reason else ""
                raise RuntimeError(
                    f"experiment {self.id} ended {self.state.value} before a trial began{reason}"
                )
            time.sleep(interval)

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | str | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """Its checkpoints (DELETED ones left out). With neither sort_by nor
        order_by, best first by the searcher metric, so `list_checkpoints()[0]`
        is the best; sort_by is a CheckpointSortBy or the name of a validation
        metric."""
        from determined.proto import api_pb2

        request = functools.partial(api_pb2.GetExperimentCheckpointsRequest, experiment_id=self.id)
        stub = self._gateway.stub
        return list_checkpoints(
            self._gateway, stub.GetExperimentCheckpoints, request, sort_by, order_by, max_results
        )

    def top_checkpoint(self, sort_by: str | None = None, smaller_is_better: bool | None = None) -> Checkpoint:
        """The best checkpoint by the searcher metric, or by the validation metric
        `sort_by` (smaller_is_better defaulting to the searcher's). ValueError
        when the experiment has none."""
        found = self.top_n_checkpoints(1, sort_by, smaller_is_better)
        if not found:
            raise ValueError(f"experiment {self.id} has no checkpoint")
        return found[0]

    def top_n_checkpoints(
        self, limit: int, sort_by: str | None = None, smaller_is_better: bool | None = None
    ) -> list[Checkpoint]:
        """The `limit` best checkpoints, best first (as top_checkpoint ranks them)."""
        order = top_order(self._gateway, self.id, sort_by, smaller_is_better)
        return self.list_checkpoints(sort_by, order, max_results=limit)
