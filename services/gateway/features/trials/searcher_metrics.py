"""A validation report that an adaptive search cannot use, refused at the gateway.

An adaptive search (ASHA) decides from every validation: one without the searcher's metric
(or, with `time_metric`, that metric) leaves the search without an answer, and Determined
fails the experiment over it. The harness refuses such a report at the call; this refuses it
from any other client (Determined's own harness, a detached run) with INVALID_ARGUMENT. The
other searchers (single, random, grid) need no metric, and take any validation.
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

from determined.common.expconf._searcher import ASHA_SEARCHERS
from determined.proto import api_pb2, events_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.parts import Queries

VALIDATION = "validation"


def adaptive_metrics(searcher: Mapping[str, Any]) -> tuple[str, ...]:
    """The metrics each validation must carry for the experiment's searcher section."""
    if searcher.get("name") not in ASHA_SEARCHERS:
        return ()
    return tuple(name for name in (searcher.get("metric"), searcher.get("time_metric")) if name)


def missing_metric(reports: Iterable[events_pb2.MetricReport], required: tuple[str, ...]) -> str | None:
    """Why the batch is refused: its first validation that lacks a required metric (None: none does).
    Metrics that are not a JSON object are left to the other checks."""
    for report in reports:
        if report.group != VALIDATION or not required:
            continue
        try:
            metrics = json.loads(report.metrics_json or "{}")
        except ValueError:
            continue
        missing = [name for name in required if not isinstance(metrics, dict) or name not in metrics]
        if missing:
            return (
                f"the validation at steps_completed={report.steps_completed} lacks {missing[0]!r}, which the"
                " experiment's adaptive search decides from (searcher.metric / searcher.time_metric)"
            )
    return None


class AdaptiveMetricCheck:
    """The check above for one gateway: each experiment's required metrics, read once."""

    def __init__(self, queries: Queries) -> None:
        self._queries = queries
        # Experiment id -> the metrics its validations must carry (a searcher never changes).
        self._required: dict[int, tuple[str, ...]] = {}

    async def check(self, request: api_pb2.ReportMetricsRequest, experiment_id: int) -> None:
        """InvalidArgumentError when a validation of the batch lacks a metric the search needs."""
        if not any(report.group == VALIDATION for report in request.reports):
            return
        if experiment_id not in self._required:
            facts = await self._queries.checkpoints.experiment(experiment_id)
            config = json.loads(facts.config_json or "{}") if facts is not None else {}
            self._required[experiment_id] = adaptive_metrics(config.get("searcher") or {})
        refusal = missing_metric(request.reports, self._required[experiment_id])
        if refusal is not None:
            raise InvalidArgumentError(refusal)
