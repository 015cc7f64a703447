"""Checks on what user code reports, done in the caller so mistakes fail at the call site.

The checks return a private copy of the metrics (so the caller may reuse its dict) holding
only JSON types: numbers, strings, bools, None, and lists/dicts of those. Objects with a
`tolist()` method (numpy scalars and arrays, torch tensors) are converted. Non-finite
floats are sent as the strings "NaN", "Infinity" and "-Infinity": strict JSON has no
such numbers, and these are the spellings Determined's API uses for them.

One report (a call's metrics, the trial's metadata, a checkpoint's metadata) may be at most
MAX_REPORT_BYTES (1 MiB) of JSON, refused at the call past it (ReportTooLargeError): well under
the event log's message limit on a local cluster (nats-server's max_payload, 8 MiB) once the
gateway wraps it in an event, and the gateway's own limit for the trial's metadata. Larger
values belong in a checkpoint's files. A cluster whose nats-server allows less (NATS's
default is 1 MB) refuses a larger report at the gateway instead; the sender then drops that
report alone (see `_metrics`).
"""

import json
import logging
import math
import numbers
from collections.abc import Mapping
from typing import Any

from determined.core._errors import ReportTooLargeError, UnserializableValueError
from determined.core._searcher import ASHA_SEARCHERS

MAX_REPORT_BYTES = 1024 * 1024
# How deep lists and dicts may nest in a metric value (far beyond any real metric).
MAX_NESTING = 100
# One encoder for every report: json.dumps with options builds a new one per call.
_COMPACT = json.JSONEncoder(separators=(",", ":"))

logger = logging.getLogger("determined.core")

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
    """A JSON-safe copy of `metrics`; TypeError/ValueError naming the bad entry
    (UnserializableValueError for a value or key with no JSON form, or one
    nested deeper than MAX_NESTING: a list that holds itself is one)."""
    return _checked_dict(metrics, argument, allow_none)


def metrics_json(metrics: dict[str, Any], group: str, steps_completed: int) -> str:
    """Checked metrics as the compact JSON text that is sent; ReportTooLargeError past
    MAX_REPORT_BYTES, naming the report and its largest value."""
    text = _COMPACT.encode(metrics)
    _check_size(text, metrics, f"the {group} report at steps_completed={steps_completed}", "metrics")
    return text


def json_object(
    value: Mapping[str, Any], what: str, argument: str, *, indent: int | None = None, allow_nan: bool = True
) -> str:
    """A dict as JSON text (compact unless `indent`); UnserializableValueError naming the key
    whose value has no JSON form, ReportTooLargeError past MAX_REPORT_BYTES."""
    separators = None if indent else (",", ":")
    try:
        text = json.dumps(value, indent=indent, separators=separators, allow_nan=allow_nan)
    except (TypeError, ValueError, RecursionError) as error:
        key = next((k for k, v in value.items() if not _dumps_alone(v, allow_nan)), None)
        where = argument if key is None else f"{argument}[{key!r}]"
        raise UnserializableValueError(
            f"{argument} must be a dict of JSON values; {where} is not: {error}"
        ) from None
    _check_size(text, value, what, argument)
    return text


def _dumps_alone(value: Any, allow_nan: bool) -> bool:
    try:
        json.dumps(value, allow_nan=allow_nan)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _check_size(text: str, value: Mapping[str, Any], what: str, argument: str) -> None:
    """ReportTooLargeError when `text` (the JSON of `value`, ASCII) is over the limit."""
    if len(text) <= MAX_REPORT_BYTES:
        return
    sizes = {key: len(json.dumps(item)) for key, item in value.items()}
    largest = max(sizes, key=sizes.__getitem__, default=None)
    detail = (
        "" if largest is None else f" (its largest value: {argument}[{largest!r}], {_size(sizes[largest])})"
    )
    raise ReportTooLargeError(
        f"{what} is {_size(len(text))} as JSON; one report may be at most {_size(MAX_REPORT_BYTES)}"
        f"{detail}. Keep large values in a checkpoint's files instead."
    )


def _size(n_bytes: int) -> str:
    if n_bytes < 1024:
        return f"{n_bytes} bytes"
    if n_bytes < 2**20:
        return f"{n_bytes / 1024:.0f} KiB"
    return f"{n_bytes / 2**20:.1f} MiB".replace(".0 MiB", " MiB")


def _checked_dict(metrics: Any, argument: str, allow_none: bool = True, depth: int = 0) -> dict[str, Any]:
    if not isinstance(metrics, Mapping):
        raise TypeError(f"{argument} must be a dict, got {type(metrics).__name__}")
    copy: dict[str, Any] = {}
    for key, value in metrics.items():
        if type(key) is not str:
            raise UnserializableValueError(
                f"{argument} keys must be str, got {type(key).__name__} key {key!r}"
            )
        if value is None and not allow_none:
            raise ValueError(f"{argument}[{key!r}] is None; validation metrics must have values")
        copy[key] = _json_value(value, argument, key, depth)
    return copy


def check_status(status: Any) -> str:
    if not isinstance(status, str):
        raise TypeError(f"status must be a str, got {type(status).__name__}")
    if not status:
        raise ValueError("status must be a non-empty string")
    return status


def searcher_metrics(searcher: Mapping[str, Any]) -> dict[str, str]:
    """{metric name: its config field} for the metrics the configured searcher reads from each
    validation (see SearcherMetricCheck for which of them a report must carry). ASHA with `time_metric` also needs that metric; seed-era
    ASHA (`max_length`, no `time_metric`) counts the report's steps_completed instead.
    """
    required: dict[str, str] = {}
    if searcher.get("metric"):
        required[searcher["metric"]] = "searcher.metric"
    if searcher.get("name") in ASHA_SEARCHERS and searcher.get("time_metric"):
        required.setdefault(searcher["time_metric"], "searcher.time_metric")
    return required


class SearcherMetricCheck:
    """What each validation report must carry for the configured searcher (`searcher`: the
    experiment config's section). An adaptive search (ASHA) decides from every validation:
    one without its metrics is refused at the call. The other searchers (single, random,
    grid) decide nothing from them: a validation without the searcher metric is accepted, as
    Determined accepts it, and the trial's log says so once. A searcher metric that is
    reported must be a number either way (the best checkpoint is ranked by it)."""

    def __init__(self, searcher: Mapping[str, Any]) -> None:
        self._required = searcher_metrics(searcher)
        self._adaptive = searcher.get("name") in ASHA_SEARCHERS
        self._warned = False

    def check(self, metrics: Mapping[str, Any]) -> None:
        if self._adaptive:
            check_searcher_metrics(metrics, self._required)
            return
        reported = {name: field for name, field in self._required.items() if name in metrics}
        check_searcher_metrics(metrics, reported)
        missing = [name for name in self._required if name not in reported]
        if missing and not self._warned:
            self._warned = True
            logger.warning(
                "a validation report lacks the searcher metric %r (searcher.metric); accepted, as"
                " this searcher does not need it, but the trial's best checkpoint and validation are"
                " ranked by it (this is said once per trial)",
                missing[0],
            )


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


def _json_value(value: Any, argument: str, key: str, depth: int = 0) -> Any:
    """The JSON form of one metric value. Nesting is counted, not left to
    Python's recursion limit: a RecursionError can strike wherever the stack
    happens to be deep, the error's own handling included."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else _NON_FINITE.get(value, "NaN")
    if kind in _PLAIN:
        return value
    if depth >= MAX_NESTING:
        raise UnserializableValueError(
            f"{argument}[{key!r}] is nested more than {MAX_NESTING} deep for JSON (or holds itself)"
        )
    if isinstance(value, float):  # numpy.float64 and friends subclass float
        return _json_value(float(value), argument, key, depth + 1)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_json_value(v, argument, key, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return _checked_dict(value, f"{argument}[{key!r}]", depth=depth + 1)
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return _json_value(tolist(), argument, key, depth + 1)
    raise UnserializableValueError(
        f"{argument}[{key!r}] must be a number, string, bool, None or a list/dict of those, "
        f"got {kind.__name__}"
    )
