"""Commands turned into events: pure validation of what users and trial
processes ask for, and the Appends that record it. The shell (servicer) hands
in everything that is not pure: ids, the seed, the petname, the clock.

Message ids are derived from the request, so a retried append is stored once:
`create-<request_id>`, `metrics-<trial>-<run>-<reporter>-<batch_seq>`, `kill-<experiment>`,
`checkpoint-<uuid>`, `progress-<trial>-<value>`.
"""

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from determined.common import expconf
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.projection import TERMINAL_STATES

MAX_CONTEXT_BYTES = 95 * 1024 * 1024


@dataclass(frozen=True)
class ValidatedConfig:
    config_json: str
    name: str
    warnings: list[str]


def validate_config(
    config_yaml: str, *, checkpoint_host_path: str, experiment_seed: int, name: str
) -> ValidatedConfig:
    """The fully defaulted config, or InvalidArgumentError listing every
    problem (expconf also requires the entrypoint of a managed experiment)."""
    try:
        config = expconf.load_config(config_yaml)
        config = expconf.apply_cluster_defaults(
            config, checkpoint_host_path=checkpoint_host_path, experiment_seed=experiment_seed, name=name
        )
    except expconf.InvalidConfigError as error:
        raise InvalidArgumentError("invalid experiment config:\n" + "\n".join(error.errors)) from error
    stored = config.to_json_dict()
    return ValidatedConfig(
        json.dumps(stored, sort_keys=True), str(stored.get("name") or name), config.warnings()
    )


def check_context_size(size: int) -> None:
    if size > MAX_CONTEXT_BYTES:
        raise InvalidArgumentError(
            f"the context directory is {size / 2**20:.1f} MiB packed; at most 95 MiB is allowed"
            " (list what to leave out in .detignore)"
        )


def experiment_created(
    experiment_id: int,
    request_id: str,
    config: ValidatedConfig,
    *,
    owner: str,
    context_hash: str,
    context_size: int,
    activate: bool,
) -> Append:
    payload = events_pb2.ExperimentCreated(
        experiment_id=experiment_id,
        name=config.name,
        owner=owner,
        config_json=config.config_json,
        context_hash=context_hash,
        context_size=context_size,
        activate=activate,
    )
    return Append(aggregate("experiment", experiment_id), payload, f"create-{request_id}", expected_version=0)


def activated(experiment_id: int, state: str, version: int) -> Append | None:
    """The activation of a PAUSED experiment, decided against the experiment's
    `version` (so two racing activations append once); None when it is active
    already."""
    if state in TERMINAL_STATES or state.startswith("STOPPING"):
        raise FailedPreconditionError(f"experiment {experiment_id} is {state} and cannot be activated")
    if state != "PAUSED":
        return None
    payload = events_pb2.ExperimentStateChanged(
        experiment_id=experiment_id, state=events_pb2.EXPERIMENT_STATE_ACTIVE, reason="activated by a user"
    )
    return Append(
        aggregate("experiment", experiment_id), payload, f"activate-{experiment_id}-{version}", version
    )


REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def checked_request_id(request_id: str) -> str:
    """A client's request id ("" when it sent none); it becomes a message id."""
    if request_id and not REQUEST_ID.fullmatch(request_id):
        raise InvalidArgumentError(
            "request_id must be 1 to 64 letters, digits, '-' or '_'"
        )
    return request_id


def kill_requested(experiment_id: int, state: str) -> Append | None:
    """The kill request, or None when the experiment has ended already. An
    experiment is killed once: a repeated kill is stored once."""
    if state in TERMINAL_STATES:
        return None
    payload = events_pb2.ExperimentKillRequested(experiment_id=experiment_id)
    return Append(aggregate("experiment", experiment_id), payload, f"kill-{experiment_id}")


def metrics_reported(request: api_pb2.ReportMetricsRequest, experiment_id: int) -> Append:
    reports = [_normalized_report(report) for report in request.reports]
    payload = events_pb2.TrialMetricsReported(
        trial_id=request.trial_id,
        experiment_id=experiment_id,
        trial_run_id=request.trial_run_id,
        reports=reports,
    )
    msg_id = f"metrics-{request.trial_id}-{request.trial_run_id}-{request.reporter_id}-{request.batch_seq}"
    return Append(aggregate("metrics", request.trial_id), payload, msg_id)


def progress_reported(request: api_pb2.ReportProgressRequest, experiment_id: int) -> Append:
    if not 0.0 <= request.progress <= 1.0:
        raise InvalidArgumentError(f"progress must be between 0 and 1, not {request.progress}")
    payload = events_pb2.TrialProgressReported(
        trial_id=request.trial_id, experiment_id=experiment_id, progress=request.progress
    )
    msg_id = f"progress-{request.trial_id}-{request.progress!r}"
    return Append(aggregate("trial", request.trial_id), payload, msg_id)


def checkpoint_reported(
    request: api_pb2.ReportCheckpointRequest, experiment_id: int, reported_at_ns: int
) -> Append:
    if not request.uuid:
        raise InvalidArgumentError("a checkpoint needs a uuid")
    if request.metadata_json:
        _check_json_object(request.metadata_json, "metadata_json")
    payload = events_pb2.CheckpointReported(
        uuid=request.uuid,
        trial_id=request.trial_id,
        experiment_id=experiment_id,
        allocation_id=request.allocation_id,
        steps_completed=request.steps_completed,
        metadata_json=request.metadata_json,
        resources=request.resources,
        reported_at_ns=reported_at_ns,
    )
    return Append(aggregate("checkpoint", request.uuid), payload, f"checkpoint-{request.uuid}")


def _normalized_report(report: events_pb2.MetricReport) -> events_pb2.MetricReport:
    """The report with NaN and infinities written as strings: PostgreSQL's
    jsonb refuses them, and one such value must not stop the projector."""
    constants: list[str] = []
    value = _check_json_object(report.metrics_json, "metrics_json", constants.append)
    if not constants:
        return report
    normalized = events_pb2.MetricReport()
    normalized.CopyFrom(report)
    normalized.metrics_json = json.dumps(_strings_for_constants(value))
    return normalized


def _strings_for_constants(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {key: _strings_for_constants(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_strings_for_constants(item) for item in value]
    return value


def _check_json_object(
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
