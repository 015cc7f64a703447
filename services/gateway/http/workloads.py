"""Determined's trial workloads (GET /api/v1/trials/{id}/workloads, which its
`det trial describe` and `det experiment describe` read): each training
report, validation report and checkpoint of the trial as one
v1WorkloadContainer, ordered as Determined orders them.

Determined's parameters: filter (FILTER_OPTION_UNSPECIFIED: all;
FILTER_OPTION_CHECKPOINT and FILTER_OPTION_CHECKPOINT_OR_VALIDATION:
validations and checkpoints; FILTER_OPTION_VALIDATION: validations),
sortKey ("batches", or a metric of the reports), orderBy, offset, limit
(0: all), removeDeletedCheckpoints. Reports are the shown ones (a resumed
run's superseded points are left out, as everywhere).
"""

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.http import shapes

JSON = dict[str, Any]
FILTERS = {
    "": {"training", "validation", "checkpoint"},
    "FILTER_OPTION_UNSPECIFIED": {"training", "validation", "checkpoint"},
    "FILTER_OPTION_CHECKPOINT": {"validation", "checkpoint"},
    "FILTER_OPTION_CHECKPOINT_OR_VALIDATION": {"validation", "checkpoint"},
    "FILTER_OPTION_VALIDATION": {"validation"},
}
BATCHES = "batches"


def kinds_of(filter_option: str) -> set[str]:
    """The kinds of workload a filter keeps; INVALID_ARGUMENT for another filter."""
    if filter_option not in FILTERS:
        raise InvalidArgumentError(
            f"filter must be one of {', '.join(sorted(FILTERS)[1:])}, not {filter_option!r}"
        )
    return FILTERS[filter_option]


def workloads(
    points: Iterable[api_pb2.MetricPoint],
    checkpoints: Iterable[api_pb2.Checkpoint],
    sort_key: str = "",
    descending: bool = False,
) -> list[JSON]:
    """The containers, ordered by `sort_key`'s value (a metric; those without
    it last), then batches, then report time; "" or "batches": by batches."""
    rows: list[tuple[float | None, int, int, JSON]] = []
    for point in points:
        metrics = json.loads(point.metrics_json)
        rows.append(
            (
                _value(metrics, sort_key),
                point.steps_completed,
                point.reported_at_ns,
                {point.group: shapes.metrics_workload(point)},
            )
        )
    for checkpoint in checkpoints:
        shown = {"checkpoint": shapes.checkpoint_workload(checkpoint)}
        rows.append((None, checkpoint.steps_completed, checkpoint.reported_at_ns, shown))
    return ordered(rows, descending)


def ordered(rows: Sequence[tuple[float | None, int, int, JSON]], descending: bool) -> list[JSON]:
    valued = sorted((row for row in rows if row[0] is not None), key=lambda r: r[:3], reverse=descending)
    unvalued = sorted((row for row in rows if row[0] is None), key=lambda r: r[1:3], reverse=descending)
    return [row[3] for row in valued + unvalued]


def _value(metrics: JSON, sort_key: str) -> float | None:
    if sort_key in ("", BATCHES):
        return None
    value = metrics.get(sort_key)
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)
