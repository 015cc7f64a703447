"""Commands turned into events: pure validation of what users and trial
processes ask for, and the Appends that record it. The shell (servicer) hands
in everything that is not pure: ids, the seed, the petname, the clock.

Message ids are derived from the request, so a retried append is stored once:
`create-<request_id>`, `metrics-<trial>-<run>-<reporter>-<batch_seq>`,
`validation-<trial>-<run>-<reporter>-<batch_seq>-<index>` (a part of a batch the harness split
after a refusal comes with reporter `<reporter>.<path of halves>`), `kill-<experiment>`,
`activate-<experiment>-<version>`, `pause-<experiment>-<version>`, `trial-kill-<trial>`,
`checkpoint-<uuid>`, `progress-<trial>-<value>`, `status-<trial>-<allocation>-<reporter>-<seq>`,
`stop-ack-<allocation>`, `early-exit-<trial>` (one per trial),
`metadata-<trial>-<version>-<hash of the metadata>` (version: the trial's last event when it was set).
"""

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from determined.common import expconf, storage
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.projection import ENDED_STATES, state_name
from services.gateway.queries import AllocationView

MAX_CONTEXT_BYTES = 95 * 1024 * 1024
VALIDATION = "validation"
# A trial's metadata travels in one event: far below NATS's message limit.
MAX_METADATA_BYTES = 1024 * 1024
# Room for an event's envelope (ids, actor, times) and its publish headers beside the payload.
EVENT_OVERHEAD_BYTES = 4096
# The reasons a trial may give for exiting early (Determined's EXITED_REASON_<name>).
EARLY_EXIT_REASONS = ("INVALID_HP", "USER_REQUESTED_STOP")


@dataclass(frozen=True)
class ValidatedConfig:
    config_json: str
    name: str
    warnings: list[str]


def validate_config(
    config_yaml: str,
    *,
    checkpoint_host_path: str,
    experiment_seed: int,
    name: str,
    checkpoint_storage: expconf.CheckpointStorage | None = None,
) -> ValidatedConfig:
    """The fully defaulted config (`checkpoint_storage`: the cluster's default storage), or
    InvalidArgumentError listing every problem (expconf also requires the entrypoint of a
    managed experiment), or naming the config limit it goes past (size, nesting, values
    with aliases expanded, hyperparameter values: expconf's `_limits.py`, checked before
    anything is expanded). CPU-bound for up to about a second on a config at the limits:
    the servicer runs it in a worker thread."""
    try:
        config = expconf.load_config(config_yaml)
        config = expconf.apply_cluster_defaults(
            config,
            checkpoint_host_path=checkpoint_host_path,
            experiment_seed=experiment_seed,
            name=name,
            checkpoint_storage=checkpoint_storage,
        )
    except expconf.InvalidConfigError as error:
        raise InvalidArgumentError("invalid experiment config:\n" + "\n".join(error.errors)) from error
    stored = config.to_json_dict()
    return ValidatedConfig(
        json.dumps(stored, sort_keys=True), str(stored.get("name") or name), config.warnings()
    )


def check_context_size(size: int, *, complete: bool = True) -> None:
    """Refuses a context archive past MAX_CONTEXT_BYTES; `complete=False`
    while it is still arriving (`size` bytes so far)."""
    if size > MAX_CONTEXT_BYTES:
        told = f"{size / 2**20:.1f} MiB" if complete else f"more than {MAX_CONTEXT_BYTES / 2**20:.0f} MiB"
        raise InvalidArgumentError(
            f"the context directory is {told} packed; at most 95 MiB is allowed"
            " (list what to leave out in .detignore)"
        )


def check_uploaded(claimed_hash: str, received_hash: str) -> None:
    """An upload is kept only when its last request named the hash of what
    arrived: without one it was cut short, with another it was damaged."""
    if not claimed_hash:
        raise InvalidArgumentError("the context upload ended before its last request: it was cut short")
    if claimed_hash != received_hash:
        raise InvalidArgumentError(
            f"the context upload was damaged: it says {claimed_hash[:80]!r} but what arrived hashes to {received_hash}"
        )


CONTEXT_HASH = re.compile(r"[0-9a-f]{64}")


def checked_context_hash(context_hash: str) -> str:
    """The hash of an uploaded context (sha256, hex), as UploadContext answered it."""
    if not CONTEXT_HASH.fullmatch(context_hash):
        raise InvalidArgumentError(
            f"context_hash {context_hash[:80]!r} is not the sha256 (64 hex digits) UploadContext answers"
        )
    return context_hash


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


@dataclass(frozen=True)
class Unchanged:
    """A user's command that changes nothing (the experiment or trial is in
    that state already, or has ended): nothing is appended and the user is
    told why, in these words."""

    reason: str


def activated(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The activation of a PAUSED experiment (created paused, or paused while
    it ran); Unchanged when it is active already or has ended."""
    return _state_changed(experiment_id, state, version, events_pb2.EXPERIMENT_STATE_ACTIVE, "activate")


def paused(experiment_id: int, state: str, version: int) -> Append | Unchanged:
    """The pause of an ACTIVE experiment: its trials stop (to be resumed when
    it is activated) and no new ones start; Unchanged when it is paused
    already or has ended."""
    return _state_changed(experiment_id, state, version, events_pb2.EXPERIMENT_STATE_PAUSED, "pause")


def _state_changed(
    experiment_id: int, state: str, version: int, target: events_pb2.ExperimentState, action: str
) -> Append | Unchanged:
    """A user's change between ACTIVE and PAUSED, decided against the
    experiment's `version` (so two racing changes append once and neither
    undoes a state it did not see). An experiment that is stopping can be
    neither paused nor activated: refused, as it is neither there already
    nor over."""
    if state in ENDED_STATES or state == state_name(events_pb2.ExperimentState.Name(target)):
        return Unchanged(f"Experiment {experiment_id} is already {state}: nothing to {action}")
    if state.startswith("STOPPING"):
        raise FailedPreconditionError(f"experiment {experiment_id} is {state} and cannot be {action}d")
    payload = events_pb2.ExperimentStateChanged(
        experiment_id=experiment_id, state=target, reason=f"{action}d by a user"
    )
    return Append(
        aggregate("experiment", experiment_id), payload, f"{action}-{experiment_id}-{version}", version
    )


REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def checked_request_id(request_id: str) -> str:
    """A client's request id ("" when it sent none); it becomes a message id."""
    if request_id and not REQUEST_ID.fullmatch(request_id):
        raise InvalidArgumentError("request_id must be 1 to 64 letters, digits, '-' or '_'")
    return request_id


# A kill changes nothing once the kill was recorded (STOPPING_KILLED) or the
# experiment or trial has ended (an experiment: or is being deleted).
_KILLED_OR_ENDED = (*ENDED_STATES, "STOPPING_KILLED")


def kill_requested(experiment_id: int, state: str) -> Append | Unchanged:
    """The kill request, or Unchanged when the experiment has ended or is
    being killed already. A repeated kill is stored once."""
    if state in _KILLED_OR_ENDED:
        return Unchanged(f"Experiment {experiment_id} is already {state}: nothing to kill")
    payload = events_pb2.ExperimentKillRequested(experiment_id=experiment_id)
    return Append(aggregate("experiment", experiment_id), payload, f"kill-{experiment_id}")


def trial_kill_requested(trial_id: int, experiment_id: int, state: str) -> Append | Unchanged:
    """The kill request of one trial, or Unchanged when it has ended or is
    being killed already; a repeated kill is stored once."""
    if state in _KILLED_OR_ENDED:
        return Unchanged(f"Trial {trial_id} is already {state}: nothing to kill")
    payload = events_pb2.TrialKillRequested(trial_id=trial_id, experiment_id=experiment_id)
    return Append(aggregate("trial", trial_id), payload, f"trial-kill-{trial_id}")


def metrics_reported(request: api_pb2.ReportMetricsRequest, experiment_id: int) -> list[Append]:
    """One TrialMetricsReported for the batch's training and custom reports
    (none when it held only validations) and one TrialValidationReported per
    validation, on its own subject so that the searcher reads validations
    without every training batch."""
    reports = [_normalized_report(report) for report in request.reports]
    batch = f"{request.trial_id}-{request.trial_run_id}-{request.reporter_id}-{request.batch_seq}"
    appends = [
        _validation_reported(request, experiment_id, report, f"validation-{batch}-{index}")
        for index, report in enumerate(reports)
        if report.group == VALIDATION
    ]
    others = [report for report in reports if report.group != VALIDATION]
    if others:
        payload = events_pb2.TrialMetricsReported(
            trial_id=request.trial_id,
            experiment_id=experiment_id,
            trial_run_id=request.trial_run_id,
            reports=others,
        )
        appends.insert(0, Append(aggregate("metrics", request.trial_id), payload, f"metrics-{batch}"))
    return appends


def check_event_sizes(appends: list[Append], max_payload: int, what: str) -> None:
    """InvalidArgumentError, naming the size and the limit, when one of the events would not
    fit in one message of the event log (nats-server's `max_payload`, which counts the
    envelope and the headers too). Checked before anything is appended: nats-server would
    otherwise refuse the message (or close the connection over it)."""
    limit = max_payload - EVENT_OVERHEAD_BYTES
    for append in appends:
        size = append.payload.ByteSize()
        if size > limit:
            raise InvalidArgumentError(
                f"{what} is too large for the event log: {size} bytes as an event, at most {limit}"
                f" (nats-server's max_payload of {max_payload} bytes less {EVENT_OVERHEAD_BYTES} for the"
                " envelope); keep large values in a checkpoint's files"
            )


def _validation_reported(
    request: api_pb2.ReportMetricsRequest, experiment_id: int, report: events_pb2.MetricReport, msg_id: str
) -> Append:
    payload = events_pb2.TrialValidationReported(
        trial_id=request.trial_id,
        experiment_id=experiment_id,
        trial_run_id=request.trial_run_id,
        steps_completed=report.steps_completed,
        metrics_json=report.metrics_json,
        reported_at_ns=report.reported_at_ns,
    )
    return Append(aggregate("validation", request.trial_id), payload, msg_id)


def progress_reported(request: api_pb2.ReportProgressRequest, experiment_id: int) -> Append:
    if not 0.0 <= request.progress <= 1.0:
        raise InvalidArgumentError(f"progress must be between 0 and 1, not {request.progress}")
    payload = events_pb2.TrialProgressReported(
        trial_id=request.trial_id, experiment_id=experiment_id, progress=request.progress
    )
    msg_id = f"progress-{request.trial_id}-{request.progress!r}"
    return Append(aggregate("trial", request.trial_id), payload, msg_id)


def status_reported(request: api_pb2.ReportStatusRequest, experiment_id: int, allocation_id: str) -> Append:
    if request.seq < 1:
        raise InvalidArgumentError("seq must number the process's status reports from 1")
    payload = events_pb2.TrialStatusReported(
        trial_id=request.trial_id, experiment_id=experiment_id, status=request.status
    )
    msg_id = f"status-{request.trial_id}-{allocation_id}-{request.reporter_id}-{request.seq}"
    return Append(aggregate("trial", request.trial_id), payload, msg_id)


def stop_acknowledged(allocation: AllocationView) -> Append:
    """The trial process saw its allocation's stop request and will exit to
    be resumed; refused when no stop was asked for (its exit 0 would then
    read as stopped, not completed)."""
    if not allocation.stop_requested:
        raise FailedPreconditionError(
            f"allocation {allocation.allocation_id} was not asked to stop; there is nothing to acknowledge"
        )
    payload = events_pb2.AllocationStopAcknowledged(
        allocation_id=allocation.allocation_id, task_id=str(allocation.trial_id)
    )
    return Append(
        aggregate("allocation", allocation.allocation_id), payload, f"stop-ack-{allocation.allocation_id}"
    )


def early_exit_reported(
    request: api_pb2.ReportEarlyExitRequest, experiment_id: int, reported: str | None
) -> Append:
    """The trial's early exit, reported once per trial: `reported` is the
    reason stored already (None: none was), and a second report is refused as
    Determined answers it (400), which the harness only warns about."""
    if request.reason not in EARLY_EXIT_REASONS:
        raise InvalidArgumentError(
            f"reason must be one of {', '.join(EARLY_EXIT_REASONS)}, not {request.reason!r}"
        )
    if reported is not None:
        raise FailedPreconditionError(
            f"an early exit of trial {request.trial_id} was already reported ({reported})"
        )
    payload = events_pb2.TrialEarlyExitReported(
        trial_id=request.trial_id, experiment_id=experiment_id, reason=request.reason
    )
    return Append(aggregate("trial", request.trial_id), payload, f"early-exit-{request.trial_id}")


def metadata_set(
    request: api_pb2.SetTrialMetadataRequest, experiment_id: int, *, version: int, current: str | None
) -> Append | None:
    """The trial's new metadata (a JSON object, stored compact and whole), or
    None when it is what is stored already (`current`), so a retried request
    stores nothing new. `version` (the trial's last event) tells apart setting
    the same metadata again after a change (A, B, A) from a retry."""
    if len(request.metadata_json) > MAX_METADATA_BYTES:
        raise InvalidArgumentError(
            f"metadata_json is {len(request.metadata_json)} bytes; at most {MAX_METADATA_BYTES} are allowed"
        )
    constants: list[str] = []
    value = _check_json_object(request.metadata_json, "metadata_json", constants.append)
    if constants:
        raise InvalidArgumentError(f"metadata_json holds {constants[0]}, which is not JSON")
    metadata_json = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if metadata_json == current:
        return None
    payload = events_pb2.TrialMetadataSet(
        trial_id=request.trial_id, experiment_id=experiment_id, metadata_json=metadata_json
    )
    digest = hashlib.sha256(metadata_json.encode()).hexdigest()[:32]
    return Append(
        aggregate("trial", request.trial_id), payload, f"metadata-{request.trial_id}-{version}-{digest}"
    )


def checkpoint_reported(
    request: api_pb2.ReportCheckpointRequest, experiment_id: int, reported_at_ns: int
) -> Append:
    if not request.uuid:
        raise InvalidArgumentError("a checkpoint needs a uuid")
    check_checkpoint_names(request.uuid, dict(request.resources))
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


def check_checkpoint_names(uuid: str, resources: dict[str, int]) -> None:
    """A reported checkpoint's uuid (it names the checkpoint's folder) and its files'
    names (relative POSIX paths inside it, folders as `dir/`; the one rule of
    `storage.check_relpath`) and sizes; InvalidArgumentError naming the first bad one."""
    try:
        storage.check_storage_id(uuid)
    except ValueError:
        raise InvalidArgumentError(
            f"checkpoint uuid {uuid[:80]!r} cannot name a checkpoint's folder (empty, '.', '..', or with a slash)"
        ) from None
    for name, size in sorted(resources.items()):
        try:
            storage.check_relpath(name)
        except ValueError as problem:
            raise InvalidArgumentError(
                f"checkpoint {uuid} lists the file {name[:200]!r}: {problem}"
            ) from None
        if size < 0:
            raise InvalidArgumentError(
                f"checkpoint {uuid} lists {name[:200]!r} with a negative size ({size})"
            )


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


def agent_enabled(agent_id: str, state: str, owner: str, version: int) -> Append | Unchanged:
    """`det agent enable`: the agent takes work again; Unchanged when it is
    enabled already. `state`: ENABLED, DISABLED or DRAINING; `version`: the
    agent aggregate's last sequence (a repeated request is stored once)."""
    if state == "ENABLED":
        return Unchanged(f"Agent {agent_id} is already enabled: nothing to do")
    payload = events_pb2.AgentEnabled(agent_id=agent_id, owner=owner)
    return Append(aggregate("agent", agent_id), payload, f"agent-enable-{agent_id}-{version}", version)


def agent_disabled(agent_id: str, state: str, drain: bool, owner: str, version: int) -> Append | Unchanged:
    """`det agent disable [--drain]`: nothing new is placed on it; without
    drain its running work is asked to stop. Unchanged when it is disabled that
    way already (disabling a draining agent without --drain stops its work)."""
    wanted = "DRAINING" if drain else "DISABLED"
    if state == wanted:
        how = "draining" if drain else "disabled"
        return Unchanged(f"Agent {agent_id} is already {how}: nothing to do")
    payload = events_pb2.AgentDisabled(agent_id=agent_id, drain=drain, owner=owner)
    return Append(aggregate("agent", agent_id), payload, f"agent-disable-{agent_id}-{version}", version)


def checked_job_id(job_id: str) -> int:
    """The experiment id of a job id: "experiment/7", or a bare "7"."""
    kind, slash, key = job_id.strip().rpartition("/")
    if (slash and kind != "experiment") or not key.isdigit() or int(key) < 1:
        raise InvalidArgumentError(
            f"job_id {job_id[:80]!r} is not an experiment's job id (experiment/<id>, or the id alone)"
        )
    return int(key)


@dataclass(frozen=True)
class JobResources:
    """What the scheduler uses of a job: its priority, weight and max_slots (0: no cap)."""

    priority: int
    weight: float
    max_slots: int


def job_resources_changed(
    experiment_id: int, request: api_pb2.UpdateJobRequest, current: JobResources, owner: str, version: int
) -> Append | Unchanged:
    """Validates the fields the request sets (priority 1..99, weight > 0,
    max_slots >= 0) and appends those that differ from `current`; Unchanged
    when none does."""
    if not (request.HasField("priority") or request.HasField("weight") or request.HasField("max_slots")):
        raise InvalidArgumentError("set at least one of priority, weight and max_slots")
    if request.HasField("priority") and not 1 <= request.priority <= 99:
        raise InvalidArgumentError(
            f"priority must be from 1 to 99 (lower runs first), not {request.priority}"
        )
    if request.HasField("weight") and not (math.isfinite(request.weight) and request.weight > 0):
        raise InvalidArgumentError(f"weight must be a number above 0, not {request.weight}")
    if request.HasField("max_slots") and request.max_slots < 0:
        raise InvalidArgumentError(f"max_slots must be 0 (no cap) or more, not {request.max_slots}")
    payload = events_pb2.JobResourcesChanged(job_id=aggregate("experiment", experiment_id), owner=owner)
    if request.HasField("priority") and request.priority != current.priority:
        payload.priority = request.priority
    if request.HasField("weight") and request.weight != current.weight:
        payload.weight = request.weight
    if request.HasField("max_slots") and request.max_slots != current.max_slots:
        payload.max_slots = request.max_slots
    changed = [name for name in ("priority", "weight", "max_slots") if payload.HasField(name)]
    if not changed:
        return Unchanged(f"Job experiment/{experiment_id} has these values already: nothing to change")
    digest = hashlib.sha256(payload.SerializeToString(deterministic=True)).hexdigest()[:16]
    return Append(payload.job_id, payload, f"job-resources-{experiment_id}-{version}-{digest}", version)


def job_resources(config_json: str, default_priority: int) -> JobResources:
    """An experiment's priority, weight and max_slots as its stored config says
    (the projection folds JobResourcesChanged into it)."""
    try:
        resources = json.loads(config_json or "{}").get("resources") or {}
    except (ValueError, AttributeError):
        resources = {}
    return JobResources(
        int(resources.get("priority") or default_priority),
        float(resources.get("weight") or 1.0),
        int(resources.get("max_slots") or 0),
    )


def resource_pool_of(config_json: str) -> str:
    """The pool a config names ("" when it names none: the default)."""
    resources = json.loads(config_json).get("resources") or {}
    return str(resources.get("resource_pool") or "")


def checked_resource_pool(config_json: str, known: list[str]) -> None:
    """Refuses a config whose resources.resource_pool names no known pool."""
    pool = resource_pool_of(config_json)
    if pool and pool not in known:
        raise InvalidArgumentError(
            f"resources.resource_pool {pool!r} is not a resource pool of this cluster; the pools are: "
            + ", ".join(known)
        )
