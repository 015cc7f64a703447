"""Experiments in the SDK: their lifecycle, trials and checkpoints."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from determined.common.states import ExperimentState, is_ended
from determined.experimental._checkpoint import Checkpoint, CheckpointSortBy, OrderBy, listing_request
from determined.experimental._trial import Trial

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.proto import api_pb2


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
    def labels(self) -> list[str]:
        return list(self._message.labels)

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

    def list_trials(self) -> list[Trial]:
        from determined.proto import api_pb2

        response: api_pb2.GetExperimentTrialsResponse = self._gateway.call(
            self._gateway.stub.GetExperimentTrials, api_pb2.GetExperimentTrialsRequest(experiment_id=self.id)
        )
        return [Trial(self._gateway, t) for t in response.trials]

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

        request = api_pb2.GetExperimentCheckpointsRequest(
            experiment_id=self.id, **listing_request(sort_by, order_by, max_results)
        )
        response: api_pb2.GetCheckpointsResponse = self._gateway.call(
            self._gateway.stub.GetExperimentCheckpoints, request
        )
        return [Checkpoint(self._gateway, c) for c in response.checkpoints]

    def top_checkpoint(self, sort_by: str | None = None, smaller_is_better: bool | None = None) -> Checkpoint:
        """The best checkpoint by the searcher metric, or by the validation metric
        `sort_by` (smaller_is_better defaulting to the searcher's). ValueError
        when the experiment has none."""
        order = top_order(self._gateway, self.id, sort_by, smaller_is_better)
        found = self.list_checkpoints(sort_by, order, max_results=1)
        if not found:
            raise ValueError(f"experiment {self.id} has no checkpoint")
        return found[0]
