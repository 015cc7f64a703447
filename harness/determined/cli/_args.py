"""Argument types of the CLI, checked at parse time so that bad input is told
apart from a missing experiment before anything is sent."""

import argparse
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime

# Ids are int64 on the wire (proto) and BIGINT in the read models.
MAX_ID = 2**63 - 1
# A task's id (notebook, TensorBoard, command, shell): a UUID.
FULL_TASK_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def id_of(kind: str) -> Callable[[str], int]:
    """An argparse `type` for the id of an experiment, trial, ...: a whole
    number from 1 to MAX_ID; anything else is refused with a message naming
    the argument (argparse adds "argument experiment_id:")."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind} id (a whole number)") from None
        if not 1 <= value <= MAX_ID:
            raise argparse.ArgumentTypeError(f"{text} is not {kind} id: ids go from 1 to {MAX_ID}")
        return value

    parse.__name__ = f"{kind.split()[-1]}_id"
    return parse


EXPERIMENT_ID = id_of("an experiment")
TRIAL_ID = id_of("a trial")


def _whole(text: str, what: str) -> int:
    try:
        return int(text.strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} (a whole number)") from None


def priority(text: str) -> int:
    """A job's priority: 1 to 99, lower first (Determined's scale)."""
    value = _whole(text, "a priority")
    if not 1 <= value <= 99:
        raise argparse.ArgumentTypeError(f"{text} is not a priority: priorities go from 1 (first) to 99")
    return value


def weight(text: str) -> float:
    """A job's fair-share weight: a number above 0."""
    try:
        value = float(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a weight (a number above 0)") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a weight: a weight is a number above 0")
    return value


def max_slots(text: str) -> int:
    """The most slots a job may hold: a whole number, or `none` for no cap (sent as 0)."""
    if text.strip().lower() == "none":
        return 0
    value = _whole(text, "a number of slots or none")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a slot cap: 0 or more, or none for no cap")
    return value


def count(text: str) -> int:
    """A number of things to keep, 0 or more (a GC policy's save_* knobs)."""
    value = _whole(text, "a count")
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a count: 0 or more")
    return value


def rank(text: str) -> int:
    """A worker's rank in a distributed trial: 0 or more."""
    value = _whole(text, "a rank")
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a rank: ranks go from 0")
    return value


def job_id(text: str) -> str:
    """A job id as the API takes it: "experiment/7" (or a bare experiment id), or
    "task/<task id>" (a notebook, TensorBoard, command or shell)."""
    kind, slash, key = text.strip().rpartition("/")
    if slash and kind == "task" and FULL_TASK_ID.match(key.lower()):
        return f"task/{key.lower()}"
    if slash and kind != "experiment":
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a job id: experiment/<id> (or the id alone), or task/<task id>"
        )
    return f"experiment/{EXPERIMENT_ID(key)}"


def time_ns(text: str) -> int:
    """A moment, in ISO 8601 ("2026-11-22T03:00:00Z", "2026-11-22 03:00", "2026-11-22"),
    as Unix nanoseconds; one without a zone is in UTC, as the CLI prints times."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: ISO 8601, e.g. 2026-11-22T03:00:00Z or '2026-11-22 03:00' (UTC)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = int(moment.timestamp())
    value = seconds * 10**9 + moment.microsecond * 1000
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a time after 1970-01-01")
    return value


def sequence(text: str) -> int:
    """A sequence of the event log: a whole number from 1."""
    value = _whole(text, "a sequence of the event log")
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"{text} is not a sequence of the event log: they go from 1")
    return value
