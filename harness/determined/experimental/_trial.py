"""Trials in the SDK: their checkpoints, logs and metrics."""

from __future__ import annotations

import argparse
import enum
import functools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from determined.common.states import TrialState
from determined.experimental._checkpoint import Checkpoint, CheckpointSortBy, OrderBy, list_checkpoints

if TYPE_CHECKING:
    from determined.cli._client import Gateway
    from determined.experimental._experiment import Experiment
    from determined.proto import api_pb2


@dataclass
class TrialMetrics:
    """One metrics report of a trial (Determined's field names). `trial_run_id` is 0: metric
    reports here do not keep which run of the trial sent them."""

    trial_id: int
    trial_run_id: int
    steps_completed: int
    end_time: datetime
    metrics: dict[str, Any]
    group: str
    batch_metrics: list[dict[str, Any]] | None = None

    @property
    def total_batches(self) -> int:
        """Determined's older name for steps_completed."""
        return self.steps_completed


class TrainingMetrics(TrialMetrics):
    """Determined's older name for a training report (a TrialMetrics of group "training")."""


class ValidationMetrics(TrialMetrics):
    """Determined's older name for a validation report (a TrialMetrics of group "validation")."""


class LogLevel(enum.Enum):
    TRACE = "TRACE"
    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"
    CRITICAL = "CRITICAL"


class TrialSortBy(enum.Enum):
    """What Experiment.list_trials sorts by (Determined's members; sorted here, in the SDK)."""

    ID = "id"
    START_TIME = "start_time"
    END_TIME = "end_time"
    STATE = "state"
    BEST_VALIDATION_METRIC = "best_validation_metric"
    LATEST_VALIDATION_METRIC = "latest_validation_metric"
    BATCHES_PROCESSED = "batches_processed"
    DURATION = "duration"
    RESTARTS = "restarts"
    CHECKPOINT_SIZE = "checkpoint_size"
    LOG_RETENTION_DAYS = "log_retention_days"


def trial_metrics(trial_id: int, point: api_pb2.MetricPoint) -> TrialMetrics:
    kind = {"training": TrainingMetrics, "validation": ValidationMetrics}.get(point.group, TrialMetrics)
    return kind(
        trial_id=trial_id,
        trial_run_id=0,
        steps_completed=point.steps_completed,
        end_time=datetime.fromtimestamp(point.reported_at_ns / 1e9, UTC),
        metrics=dict(json.loads(point.metrics_json or "{}")),
        group=point.group,
    )


def iter_trial_metrics(gateway: Gateway, trial_id: int, group: str) -> Iterator[TrialMetrics]:
    """Every stored metrics report of the trial in `group` ("" for every group), oldest first."""
    from determined.proto import api_pb2

    request = api_pb2.GetTrialMetricsRequest(trial_id=trial_id, group=group)
    for response in gateway.stream(gateway.stub.GetTrialMetrics, request):
        for point in response.points:
            yield trial_metrics(trial_id, point)


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

        request = functools.partial(api_pb2.GetTrialCheckpointsRequest, trial_id=self.id)
        stub = self._gateway.stub
        return list_checkpoints(
            self._gateway, stub.GetTrialCheckpoints, request, sort_by, order_by, max_results
        )

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

    def logs(
        self,
        follow: bool = False,
        *,
        head: int | None = None,
        tail: int | None = None,
        container_ids: list[str] | None = None,
        rank_ids: list[int] | None = None,
        stdtypes: list[str] | None = None,
        min_level: LogLevel | None = None,
        timestamp_before: int | str | None = None,
        timestamp_after: int | str | None = None,
        sources: list[str] | None = None,
        search_text: str | None = None,
    ) -> Iterator[str]:
        """Its log lines as `det trial logs` prints them, each ending with a newline; with
        follow, until the trial ends. The filters are `det trial logs`'s flags; a timestamp
        is Unix seconds or an ISO 8601 / RFC 3339 string."""
        from determined.cli._log_filters import log_request

        if head is not None and tail is not None:
            raise ValueError("give head or tail, not both")
        if any(n is not None and n < 0 for n in (head, tail)):
            raise ValueError(f"head and tail must be 0 or more, not {head if tail is None else tail}")
        flags = argparse.Namespace(
            follow=follow,
            head=head,
            tail=tail,
            agent_ids=None,
            container_ids=container_ids,
            rank_ids=rank_ids,
            stdtypes=stdtypes,
            sources=sources,
            level=None if min_level is None else LogLevel(min_level).value,
            timestamp_before=_time_ns(timestamp_before),
            timestamp_after=_time_ns(timestamp_after),
        )
        request = log_request(flags, self.id)
        request.search_text = search_text or ""
        yield from self._lines(request)

    iter_logs = logs

    def _lines(self, request: api_pb2.TrialLogsRequest) -> Iterator[str]:
        from determined.cli.trial import log_lines

        for entry in self._gateway.stream(self._gateway.stub.TrialLogs, request):
            yield from log_lines(entry).splitlines(keepends=True)

    def iter_metrics(self, group: str) -> Iterator[TrialMetrics]:
        """Every stored metrics report of `group` ("training", "validation", ...; "" for
        every group), oldest first."""
        return iter_trial_metrics(self._gateway, self.id, group)

    # Determined's older names.
    stream_metrics = iter_metrics

    def stream_training_metrics(self) -> Iterator[TrialMetrics]:
        return self.iter_metrics("training")

    def stream_validation_metrics(self) -> Iterator[TrialMetrics]:
        return self.iter_metrics("validation")

    def get_experiment(self) -> Experiment:
        from determined.experimental._experiment import Experiment, get_experiment_message

        return Experiment(self._gateway, get_experiment_message(self._gateway, self.experiment_id).experiment)

    def get_checkpoints(
        self, sort_by: str | CheckpointSortBy | None = None, order_by: OrderBy | str | None = None
    ) -> list[Checkpoint]:
        """Determined's older name for list_checkpoints."""
        return self.list_checkpoints(sort_by, order_by)

    def select_checkpoint(
        self,
        latest: bool = False,
        best: bool = False,
        uuid: str | None = None,
        sort_by: str | None = None,
        smaller_is_better: bool | None = None,
    ) -> Checkpoint:
        """Determined's older way to pick one checkpoint: the latest, the best, or by uuid."""
        if sum((latest, best, uuid is not None)) != 1:
            raise ValueError("give exactly one of latest, best or uuid")
        if sort_by is not None and not best:
            raise ValueError("sort_by and smaller_is_better go with best")
        if uuid is not None:
            from determined.cli.checkpoint import get_checkpoint

            return Checkpoint(self._gateway, get_checkpoint(self._gateway, uuid))
        if best:
            return self.top_checkpoint(sort_by, smaller_is_better)
        found = self.list_checkpoints(CheckpointSortBy.BATCH_NUMBER, OrderBy.DESC, max_results=1)
        if not found:
            raise ValueError(f"trial {self.id} has no checkpoint")
        return found[0]


def _time_ns(moment: int | str | None) -> int | None:
    """Unix seconds or an ISO 8601 string as Unix nanoseconds; ValueError for anything else."""
    from determined.cli._args import time_ns

    if moment is None:
        return None
    if isinstance(moment, bool) or not isinstance(moment, int | str):
        raise ValueError(f"a timestamp is Unix seconds or an ISO 8601 string, not {moment!r}")
    if isinstance(moment, int):
        return moment * 10**9
    try:
        return time_ns(moment)
    except argparse.ArgumentTypeError as problem:
        raise ValueError(str(problem)) from None


def iter_trials_metrics(gateway: Gateway, trial_ids: Iterable[int], group: str) -> Iterator[TrialMetrics]:
    """The reports of each trial in turn (trial by trial, each oldest first)."""
    for trial_id in trial_ids:
        yield from iter_trial_metrics(gateway, trial_id, group)


def sorted_trials(
    trials: list[Trial], sort_by: TrialSortBy, order_by: OrderBy | str, searcher_metric: str
) -> list[Trial]:
    """Trials in the order asked; those without the value sorted by (no validation yet,
    not ended) come last either way, by id. `searcher_metric`: the experiment's."""
    from determined.experimental._unsupported import refuse

    sort_by = TrialSortBy(sort_by)
    if sort_by not in _TRIAL_KEYS:
        refuse(f"TrialSortBy.{sort_by.name}", "trials here have no such field to sort by")
    order = OrderBy(order_by.lower()) if isinstance(order_by, str) else order_by
    values = {t.id: _TRIAL_KEYS[sort_by](t._message, searcher_metric) for t in trials}
    by_id = sorted(trials, key=lambda t: t.id)
    valued = sorted(
        (t for t in by_id if values[t.id] is not None),
        key=lambda t: values[t.id],
        reverse=order is OrderBy.DESC,
    )
    return valued + [t for t in by_id if values[t.id] is None]


def _latest_validation(message: api_pb2.Trial, searcher_metric: str) -> Any:
    if not message.HasField("latest_validation"):
        return None
    value = json.loads(message.latest_validation.metrics_json or "{}").get(searcher_metric)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


_TRIAL_KEYS: dict[TrialSortBy, Callable[[api_pb2.Trial, str], Any]] = {
    TrialSortBy.ID: lambda m, _: m.id,
    TrialSortBy.START_TIME: lambda m, _: m.started_at_ns or None,
    TrialSortBy.END_TIME: lambda m, _: m.ended_at_ns or None,
    TrialSortBy.STATE: lambda m, _: m.state,
    TrialSortBy.BEST_VALIDATION_METRIC: lambda m, _: (
        m.searcher_metric_value if m.HasField("searcher_metric_value") else None
    ),
    TrialSortBy.LATEST_VALIDATION_METRIC: _latest_validation,
    TrialSortBy.BATCHES_PROCESSED: lambda m, _: m.total_batches,
    TrialSortBy.DURATION: lambda m, _: (m.ended_at_ns - m.started_at_ns) if m.ended_at_ns else None,
    TrialSortBy.RESTARTS: lambda m, _: m.restarts,
}
