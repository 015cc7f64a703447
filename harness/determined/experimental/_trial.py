"""Trials in the SDK: their checkpoints, logs and metrics."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from determined.common.states import TrialState
from determined.experimental._checkpoint import Checkpoint, CheckpointSortBy, OrderBy, listing_request

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.proto import api_pb2


@dataclass(frozen=True)
class TrialMetrics:
    """One metrics report of a trial."""

    trial_id: int
    group: str
    steps_completed: int
    end_time: datetime
    metrics: dict[str, Any]


class Trial:
    """One trial, as the master knew it when it was fetched (`reload()` fetches it again)."""

    def __init__(self, gateway: Gateway, message: api_pb2.Trial) -> None:
        self._gateway = gateway
        self._message = message

    def __repr__(self) -> str:
        return f"Trial(id={self.id}, experiment_id={self.experiment_id}, state={self.state.value})"

    @property
    def id(self) -> int:
        return self._message.id

    @property
    def experiment_id(self) -> int:
        return self._message.experiment_id

    @property
    def state(self) -> TrialState:
        return TrialState(self._message.state)

    @property
    def hparams(self) -> dict[str, Any]:
        return dict(json.loads(self._message.hparams_json)) if self._message.hparams_json else {}

    def reload(self) -> None:
        from determined.proto import api_pb2

        response: api_pb2.GetTrialResponse = self._gateway.call(
            self._gateway.stub.GetTrial, api_pb2.GetTrialRequest(trial_id=self.id)
        )
        self._message = response.trial

    def kill(self) -> None:
        from determined.proto import api_pb2

        self._gateway.call(self._gateway.stub.KillTrial, api_pb2.KillTrialRequest(trial_id=self.id))

    def list_checkpoints(
        self,
        sort_by: str | CheckpointSortBy | None = None,
        order_by: OrderBy | str | None = None,
        max_results: int | None = None,
    ) -> list[Checkpoint]:
        """Its checkpoints (DELETED ones left out). With neither sort_by nor
        order_by, best first by the searcher metric; sort_by is a
        CheckpointSortBy or the name of a validation metric."""
        from determined.proto import api_pb2

        request = api_pb2.GetTrialCheckpointsRequest(
            trial_id=self.id, **listing_request(sort_by, order_by, max_results)
        )
        response: api_pb2.GetCheckpointsResponse = self._gateway.call(
            self._gateway.stub.GetTrialCheckpoints, request
        )
        return [Checkpoint(self._gateway, c) for c in response.checkpoints]

    def top_checkpoint(self, sort_by: str | None = None, smaller_is_better: bool | None = None) -> Checkpoint:
        """The best checkpoint by the searcher metric, or by the validation metric
        `sort_by` (smaller_is_better defaulting to the experiment's searcher's).
        ValueError when the trial has none."""
        from determined.experimental._experiment import top_order

        order = top_order(self._gateway, self.experiment_id, sort_by, smaller_is_better)
        found = self.list_checkpoints(sort_by, order, max_results=1)
        if not found:
            raise ValueError(f"trial {self.id} has no checkpoint")
        return found[0]

    def logs(self, follow: bool = False) -> Iterator[str]:
        """Its log lines as `det trial logs` prints them, each ending with a
        newline; with follow, until the trial ends."""
        from determined.cli.trial import log_lines
        from determined.proto import api_pb2

        request = api_pb2.TrialLogsRequest(trial_id=self.id, follow=follow)
        for entry in self._gateway.stream(self._gateway.stub.TrialLogs, request):
            yield from log_lines(entry).splitlines(keepends=True)

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """Every stored metrics report of `group` ("training", "validation", ...),
        oldest first."""
        from determined.proto import api_pb2

        request = api_pb2.GetTrialMetricsRequest(trial_id=self.id, group=group)
        for response in self._gateway.stream(self._gateway.stub.GetTrialMetrics, request):
            for point in response.points:
                yield TrialMetrics(
                    trial_id=self.id,
                    group=point.group,
                    steps_completed=point.steps_completed,
                    end_time=datetime.fromtimestamp(point.reported_at_ns / 1e9, UTC),
                    metrics=dict(json.loads(point.metrics_json or "{}")),
                )
