"""What the features' pure commands share: the answer of a command that
changes nothing, and the check of a JSON object a request carries."""

import json
from collections.abc import Callable
from dataclasses import dataclass

from determined.common import states
from services.gateway.errors import InvalidArgumentError

# A kill changes nothing once the kill was recorded (STOPPING_KILLED) or the
# experiment or trial has ended (an experiment: or is being deleted).
KILLED_OR_ENDED = states.EXPERIMENT_ENDED_STATES | {states.ExperimentState.STOPPING_KILLED}


@dataclass(frozen=True)
class Unchanged:
    """A user's command that changes nothing (the experiment or trial is in
    that state already, or has ended): nothing is appended and the user is
    told why, in these words."""

    reason: str


def check_json_object(
    text: str, what: str, on_constant: Callable[[str], object] | None = None
) -> dict[str, object]:
    def parse_constant(name: str) -> float:
        if on_constant is not None:
            on_constant(name)
        return float(name)

    try:
        value = json.loads(text, parse_constant=parse_constant)
    except ValueError as error:
        raise InvalidArgumentError(f"{what} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what} must be a JSON object")
    return value
