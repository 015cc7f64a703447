"""Checks on what user code reports, done in the caller so mistakes fail at the call site.

The checks return a private copy of the metrics (so the caller may reuse its dict) holding
only JSON types: numbers, strings, bools, None, and lists/dicts of those. Objects with a
`tolist()` method (numpy scalars and arrays, torch tensors) are converted. Non-finite
floats are sent as the strings "NaN", "Infinity" and "-Infinity": strict JSON has no
such numbers, and these are the spellings Determined's API uses for them.
"""

import math
import numbers
from collections.abc import Mapping
from typing import Any

from determined.core._searcher import ASHA_SEARCHERS

_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_PLAIN = (int, str, bool, type(None))
_SEARCHER_FIELDS = {"searcher.metric": "the searcher metric", "searcher.time_metric": "the time metric"}


def check_steps_completed(steps_completed: Any) -> int:
    if isinstance(steps_completed, bool) or not isinstance(steps_completed, numbers.Integral):
        raise TypeError(f"steps_completed must be an int, got {type(steps_completed).__name__}")
    steps = int(steps_completed)
    if steps < 0:
        raise ValueError(f"steps_completed must be >= 0, got {steps}")
    return steps


def check_group(group: Any) -> str:
    if not isinstance(group, str):
        raise TypeError(f"group must be a str, got {type(group).__name__}")
    if not group or "." in group:
        raise ValueError(f"group must be a non-empty string without '.', got {group!r}")
    return group


def check_metrics(metrics: Any, *, argument: str = "metrics", allow_none: bool = True) -> dict[str, Any]:
    """A JSON-safe copy of `metrics`; TypeError/ValueError naming the bad entry."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{argument} must be a dict, got {type(metrics).__name__}")
    copy: dict[str, Any] = {}
    for key, value in metrics.items():
        if type(key) is not str:
            raise TypeError(f"{argument} keys must be str, got {type(key).__name__} key {key!r}")
        if value is None and not allow_none:
            raise ValueError(f"{argument}[{key!r}] is None; validation metrics must have values")
        copy[key] = _json_value(value, argument, key)
    return copy


def check_status(status: Any) -> str:
    if not isinstance(status, str):
        raise TypeError(f"status must be a str, got {type(status).__name__}")
    if not status:
        raise ValueError("status must be a non-empty string")
    return status


def searcher_metrics(searcher: Mapping[str, Any]) -> dict[str, str]:
    """{metric name: its config field} for the metrics the configured searcher reads from each
    validation. A report without them would fail the experiment in the searcher, so the
    harness refuses it at the call. ASHA with `time_metric` also needs that metric; seed-era
    ASHA (`max_length`, no `time_metric`) counts the report's steps_completed instead.
    """
    required: dict[str, str] = {}
    if searcher.get("metric"):
        required[searcher["metric"]] = "searcher.metric"
    if searcher.get("name") in ASHA_SEARCHERS and searcher.get("time_metric"):
        required.setdefault(searcher["time_metric"], "searcher.time_metric")
    return required


def check_searcher_metrics(metrics: Mapping[str, Any], required: Mapping[str, str]) -> None:
    """ValueError when a metric the searcher reads is missing, TypeError when it is no number."""
    for name, field in required.items():
        what = f"{_SEARCHER_FIELDS[field]} {name!r} ({field})"
        if name not in metrics:
            reported = ", ".join(metrics) or "nothing"
            raise ValueError(f"validation metrics must include {what}; reported: {reported}")
        if not _is_number(metrics[name]):
            raise TypeError(f"{what} must be a number, got {type(metrics[name]).__name__}")


def _is_number(value: Any) -> bool:
    """A real number, bool excepted; numpy scalars and 0-d tensors (through tolist()) count."""
    tolist = getattr(value, "tolist", None)
    if not isinstance(value, numbers.Real) and callable(tolist):
        value = tolist()
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_progress(progress: Any) -> float:
    if isinstance(progress, bool) or not isinstance(progress, (int, float)):
        raise TypeError(f"progress must be a float, got {type(progress).__name__}")
    if not 0 <= progress <= 1:
        raise ValueError(f"progress must be between 0 and 1, got {progress}")
    return float(progress)


def _json_value(value: Any, argument: str, key: str) -> Any:
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else _NON_FINITE.get(value, "NaN")
    if kind in _PLAIN:
        return value
    if isinstance(value, float):  # numpy.float64 and friends subclass float
        return _json_value(float(value), argument, key)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v, argument, key) for v in value]
    if isinstance(value, Mapping):
        return check_metrics(value, argument=f"{argument}[{key!r}]")
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _json_value(tolist(), argument, key)
    raise TypeError(
        f"{argument}[{key!r}] must be a number, string, bool, None or a list/dict of those, "
        f"got {kind.__name__}"
    )
