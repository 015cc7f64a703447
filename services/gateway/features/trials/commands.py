"""What trial processes report, and users ask of one trial, turned into
events: pure validation and the Appends that record it.

Message ids are derived from the request, so a retried append is stored once:
`metrics-<trial>-<run>-<reporter>-<batch_seq>`,
`validation-<trial>-<run>-<reporter>-<batch_seq>-<index>` (a part of a batch the harness split
after a refusal comes with reporter `<reporter>.<path of halves>`), `trial-kill-<trial>-<version>`
(version: the trial's last event when it was asked; `trial-kill-<trial>` in logs written before
continue existed),
`progress-<trial>-<reporter>-<seq>`, `status-<trial>-<allocation>-<reporter>-<seq>`,
`stop-ack-<allocation>`, `early-exit-<trial>` (one per trial),
`metadata-<trial>-<version>-<hash of the metadata>` (version: the trial's last event when it was set).
"""

import hashlib
import json
import math

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import KILLED_OR_ENDED, Unchanged, check_json_object
from services.gateway.features.trials.queries import AllocationView, TrialStatus

VALIDATION = "validation"


# A trial's metadata travels in one event: far below NATS's message limit.
MAX_METADATA_BYTES = 1024 * 1024


# Room for an event's envelope (ids, actor, times) and its publish headers beside the payload.
EVENT_OVERHEAD_BYTES = 4096


# The reasons a trial may give for exiting early (Determined's EXITED_REASON_<name>).
EARLY_EXIT_REASONS = ("INVALID_HP", "USER_REQUESTED_STOP")


def trial_kill_requested(trial_id: int, status: TrialStatus, version: int) -> Append | Unchanged:
    """The kill request of one trial, or Unchanged when it has ended or is
    being killed already. A repeated kill is stored once; its message id names
    the trial's version it was decided at, so that the kill of a trial reopened
    by a continue is not taken for the kill before it."""
    if status.state in KILLED_OR_ENDED:
        return Unchanged(f"Trial {trial_id} is already {status.state}: nothing to kill")
    if status.kill_requested:
        return Unchanged(f"Trial {trial_id} is being killed already: nothing to kill")
    payload = events_pb2.TrialKillRequested(trial_id=trial_id, experiment_id=status.experiment_id)
    return Append(aggregate("trial", trial_id), payload, f"trial-kill-{trial_id}-{version}")


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
    """Stored once per (process, report): the same progress reported again later, or by
    another run of the trial, is a new report, not a retry."""
    if not 0.0 <= request.progress <= 1.0:
        raise InvalidArgumentError(f"progress must be between 0 and 1, not {request.progress}")
    if request.seq < 1:
        raise InvalidArgumentError("seq must number the process's progress reports from 1")
    payload = events_pb2.TrialProgressReported(
        trial_id=request.trial_id, experiment_id=experiment_id, progress=request.progress
    )
    msg_id = f"progress-{request.trial_id}-{request.reporter_id}-{request.seq}"
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


def compact_metadata(metadata_json: str) -> str:
    """A metadata JSON object (at most MAX_METADATA_BYTES, strict JSON) as it is stored:
    compact; InvalidArgumentError naming what is wrong."""
    if len(metadata_json) > MAX_METADATA_BYTES:
        raise InvalidArgumentError(
            f"metadata_json is {len(metadata_json)} bytes; at most {MAX_METADATA_BYTES} are allowed"
        )
    constants: list[str] = []
    value = check_json_object(metadata_json, "metadata_json", constants.append)
    if constants:
        raise InvalidArgumentError(f"metadata_json holds {constants[0]}, which is not JSON")
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def metadata_set(
    request: api_pb2.SetTrialMetadataRequest, experiment_id: int, *, version: int, current: str | None
) -> Append | None:
    """The trial's new metadata (a JSON object, stored compact and whole), or
    None when it is what is stored already (`current`), so a retried request
    stores nothing new. `version` (the trial's last event) tells apart setting
    the same metadata again after a change (A, B, A) from a retry."""
    metadata_json = compact_metadata(request.metadata_json)
    if metadata_json == current:
        return None
    payload = events_pb2.TrialMetadataSet(
        trial_id=request.trial_id, experiment_id=experiment_id, metadata_json=metadata_json
    )
    digest = hashlib.sha256(metadata_json.encode()).hexdigest()[:32]
    return Append(
        aggregate("trial", request.trial_id), payload, f"metadata-{request.trial_id}-{version}-{digest}"
    )


def _normalized_report(report: events_pb2.MetricReport) -> events_pb2.MetricReport:
    """The report with NaN and infinities written as strings: PostgreSQL's
    jsonb refuses them, and one such value must not stop the projector."""
    constants: list[str] = []
    value = check_json_object(report.metrics_json, "metrics_json", constants.append)
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
