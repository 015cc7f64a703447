"""det experiment cancel and continue turned into events (pure): what may be
asked of an experiment in which state, the continued config, and the Appends
that record them. The shell is runs.py.

Message ids: `cancel-<experiment>-<version>` and `continue-<experiment>-<version>`
(the experiment's version the request was decided at), so a retried request is
stored once, and a cancel or a continue after the experiment was continued is
not taken for an earlier one.
"""

import json
from typing import Any

from determined.common import expconf, states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import Unchanged

# The one searcher whose experiments can be continued (Determined 0.38 also
# reruns the unfinished trials of a grid or random search: not here).
CONTINUABLE_SEARCHER = "single"


def cancel_requested(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The cancel request, or Unchanged when the experiment is stopping or has
    ended already (Determined: a cancel then is a no-op)."""
    if states.is_stopping(state) or state in states.EXPERIMENT_ENDED_STATES:
        return Unchanged(f"Experiment {experiment_id} is already {state}: nothing to cancel")
    payload = events_pb2.ExperimentCancelRequested(experiment_id=experiment_id)
    return Append(aggregate("experiment", experiment_id), payload, f"cancel-{experiment_id}-{version}")


def override_config(text: str) -> dict[str, Any]:
    """The overrides a continue sends (YAML, within the config limits; empty: none)."""
    try:
        value = expconf.parse_yaml(text) if text.strip() else {}
    except expconf.InvalidConfigError as error:
        raise InvalidArgumentError("invalid override config:\n" + "\n".join(error.errors)) from error
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgumentError("the override config must be a mapping of config fields")
    return value


def continued_config(experiment: api_pb2.Experiment, override: dict[str, Any]) -> str:
    """The experiment's config with the overrides merged in (JSON, to be
    validated), or why it cannot be continued: only an ended single-searcher
    experiment, managed by the cluster and not archived (Determined edits no
    archived experiment), whose overrides keep it single."""
    eid, state = experiment.id, experiment.state
    if experiment.archived:
        raise FailedPreconditionError(
            f"experiment {eid} is archived: unarchive it (det experiment unarchive {eid}) to continue it"
        )
    if state not in states.TERMINAL_STATES:
        raise FailedPreconditionError(
            f"experiment {eid} is {state}: only an ended experiment (COMPLETED, CANCELED or ERROR) "
            "can be continued"
        )
    if experiment.unmanaged:
        raise FailedPreconditionError(
            f"experiment {eid} is a detached run: its script trains it, the cluster cannot continue it"
        )
    stored = json.loads(experiment.config_json or "{}")
    searcher = _searcher_name(stored)
    if searcher != CONTINUABLE_SEARCHER:
        raise InvalidArgumentError(
            f"experiment {eid} uses the {searcher!r} searcher: only a single-searcher experiment "
            "can be continued"
        )
    merged = expconf.merged_config(stored, override)
    if _searcher_name(merged) != CONTINUABLE_SEARCHER:
        raise InvalidArgumentError(
            f"the override config must keep the single searcher, not {_searcher_name(merged)!r}"
        )
    return json.dumps(merged)


def _searcher_name(config: dict[str, Any]) -> str:
    searcher = config.get("searcher")
    return str(searcher.get("name", "")) if isinstance(searcher, dict) else ""


def experiment_continued(experiment_id: int, config_json: str, version: int) -> Append:
    """The continue, decided against the experiment's `version`: two racing
    continues append once."""
    payload = events_pb2.ExperimentContinued(experiment_id=experiment_id, config_json=config_json)
    msg_id = f"continue-{experiment_id}-{version}"
    return Append(aggregate("experiment", experiment_id), payload, msg_id, expected_version=version)
