"""An event as people read it (LoggedEvent): what happened in one line, why
in words where the event carries a reason, who appended it, what it answers,
and its payload with every secret redacted (redaction.py).

Each Envelope payload type has its line in SUMMARIES (a test checks that none
is missing). An event read as not well-formed (StoredEvent.skipped) is worded
as unreadable, with why, and never raises.
"""

import json
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from determined.common.states import experiment_state, trial_state
from determined.proto import api_pb2
from services.common.eventlog import StoredEvent
from services.gateway.features.events.redaction import redacted_fields

# At most this many metrics of a validation are named in its line.
SHOWN_METRICS = 3
# A checkpoint's uuid is named by its first characters, as `det checkpoint` lists do.
SHORT_UUID = 8


def logged_event(stored: StoredEvent, causation_sequence: int = 0) -> api_pb2.LoggedEvent:
    """The stored event in words; `causation_sequence` the sequence of the
    event it answers, when the reader found it (0 else)."""
    envelope = stored.envelope
    event = api_pb2.LoggedEvent(
        sequence=stored.sequence,
        occurred_at_ns=envelope.occurred_at_ns,
        aggregate=envelope.aggregate,
        actor=envelope.actor,
        event_id=envelope.event_id,
        causation_id=envelope.causation_id,
        causation_sequence=causation_sequence,
        correlation_id=envelope.correlation_id,
    )
    event_type = envelope.WhichOneof("payload")
    if stored.skipped or event_type is None:
        event.summary = f"unreadable event: {stored.skipped or 'no payload this version knows'}"
        return event
    payload = getattr(envelope, event_type)
    event.type = event_type
    event.reason = reason_of(payload)
    event.summary = summary_of(event_type, payload)
    event.payload_json = payload_json(payload)
    return event


def summary_of(event_type: str, payload: Message) -> str:
    """What happened, in one line."""
    worded = SUMMARIES.get(event_type)
    return worded(payload) if worded is not None else event_type


def reason_of(payload: Message) -> str:
    """The reason the event carries in words ("" when it carries none): its
    `reason` field, else its `error`."""
    for field in ("reason", "error"):
        if field in payload.DESCRIPTOR.fields_by_name and (value := getattr(payload, field)):
            return str(value)
    return ""


def payload_json(payload: Message) -> str:
    """The payload in protobuf's JSON form (field names as in events.proto), redacted."""
    fields = json_format.MessageToDict(payload, preserving_proto_field_name=True)
    return json.dumps(redacted_fields(fields), separators=(",", ":"))


def _short(uuid: str) -> str:
    return uuid[:SHORT_UUID]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _metrics(metrics_json: str) -> str:
    """The first SHOWN_METRICS metrics of a JSON object of them: "loss=0.31 acc=0.81"."""
    try:
        metrics = json.loads(metrics_json or "{}")
    except ValueError:
        return "(metrics not readable)"
    if not isinstance(metrics, dict):
        return "(metrics not readable)"
    shown = [f"{name}={_number(value)}" for name, value in list(metrics.items())[:SHOWN_METRICS]]
    more = len(metrics) - SHOWN_METRICS
    return " ".join(shown + ([f"(+{more} more)"] if more > 0 else []))


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _tensorboard_files_deleted(payload: Any) -> str:
    files = f"TensorBoard files of experiment {payload.experiment_id}"
    if payload.remaining:
        return f"{files} partly deleted: {_plural(len(payload.remaining), 'file')} left"
    if payload.error:
        return f"{files} not deleted"
    return f"{files} deleted ({payload.bytes_freed} bytes freed)"


def _placements(payload: Any) -> str:
    """Where an allocation's slots are: "agent-1 slots 0,1; agent-2 slot 0"
    (logs from before gangs name one agent and its slots)."""
    places = [(p.agent_id, list(p.slot_ids)) for p in payload.placements] or [
        (payload.agent_id, list(payload.slot_ids))
    ]
    return "; ".join(
        f"{agent} {'slot' if len(slots) == 1 else 'slots'} {','.join(map(str, slots))}" if slots else agent
        for agent, slots in places
    )


def _exit(payload: Any) -> str:
    how = "was killed" if payload.killed else f"exited {payload.exit_code}"
    # A gang's part (AllocationResourcesExited) has no agent_lost: the whole's exit says it.
    lost = getattr(payload, "agent_lost", False)
    notes = [note for note, on in (("agent lost", lost), ("fatal", payload.fatal)) if on]
    return how + (f" ({', '.join(notes)})" if notes else "")


def _state(named: Callable[[int], str], value: int) -> str:
    """A state's word; "in no known state" for a value this version does not name."""
    try:
        return str(named(value))
    except ValueError:
        return "in no known state"


def _changes(payload: Any, fields: tuple[str, ...]) -> str:
    """The optional fields set on a change event: "priority=5 weight=2"."""
    changed = [f"{field}={_number(getattr(payload, field))}" for field in fields if payload.HasField(field)]
    return " ".join(changed) or "nothing changed"


def _job_resources(p: Any) -> str:
    return f"job {p.job_id}: {_changes(p, ('priority', 'weight', 'max_slots'))}"


def _user_updated(p: Any) -> str:
    return f"user {p.user_id} updated: {_changes(p, ('username', 'display_name', 'admin', 'active'))}"


def _metrics_reported(p: Any) -> str:
    groups = sorted({report.group for report in p.reports})
    steps = max((report.steps_completed for report in p.reports), default=0)
    return (
        f"trial {p.trial_id} run {p.trial_run_id}: {_plural(len(p.reports), 'metric report')}"
        f" ({', '.join(groups)}) up to {steps} batches"
    )


def _allocation_requested(p: Any) -> str:
    task = (
        f"trial {p.trial.trial_id} run {p.trial.trial_run_id}" if p.HasField("trial") else p.task_type.lower()
    )
    pool = p.resource_pool or "default"
    return f"allocation {p.allocation_id} requested: {_plural(p.slots, 'slot')} in pool {pool} for {task}"


def _user_created(p: Any) -> str:
    traits = [trait for trait, on in (("admin", p.admin), ("inactive", not p.active)) if on]
    return f"user {p.username} (id {p.user_id}) created" + (f" ({', '.join(traits)})" if traits else "")


def _details_set(p: Any) -> str:
    changed = [name for name in ("name", "description", "notes") if p.HasField(name)]
    changed += ["labels"] if p.HasField("labels") else []
    return f"experiment {p.experiment_id}: {', '.join(changed) or 'nothing'} set"


SUMMARIES: dict[str, Callable[[Any], str]] = {
    "experiment_created": lambda p: (
        f"experiment {p.experiment_id} {p.name!r} created by {p.owner}" + ("" if p.activate else " (paused)")
    ),
    "experiment_state_changed": lambda p: f"experiment {p.experiment_id} {_state(experiment_state, p.state)}",
    "experiment_kill_requested": lambda p: f"kill of experiment {p.experiment_id} asked",
    "experiment_progress_changed": lambda p: f"experiment {p.experiment_id} {p.progress:.0%} done",
    "experiment_cancel_requested": lambda p: f"cancel of experiment {p.experiment_id} asked",
    "experiment_archive_set": lambda p: (
        f"experiment {p.experiment_id} {'archived' if p.archived else 'unarchived'}"
    ),
    "experiment_details_set": _details_set,
    "experiment_continued": lambda p: f"experiment {p.experiment_id} continued",
    "trial_created": lambda p: (
        f"trial {p.trial_id} of experiment {p.experiment_id} created"
        + (f", length {p.length}" if p.length else "")
    ),
    "trial_ended": lambda p: f"trial {p.trial_id} ended {_state(trial_state, p.state)}",
    "trial_reopened": lambda p: f"trial {p.trial_id} of experiment {p.experiment_id} reopened",
    "unmanaged_trial_heartbeat": lambda p: (
        f"detached trial {p.trial_id} alive (next within {p.timeout_s:g} s)"
    ),
    "unmanaged_trial_exited": lambda p: (
        f"detached trial {p.trial_id} said it ended {_state(trial_state, p.state)}"
        + (f": {p.reason}" if p.reason else "")
    ),
    "trial_progress_reported": lambda p: f"trial {p.trial_id} {p.progress:.0%} done",
    "trial_metrics_reported": _metrics_reported,
    "trial_kill_requested": lambda p: f"kill of trial {p.trial_id} asked",
    "trial_stop_requested": lambda p: (
        f"trial {p.trial_id} to stop" + (f" at rung {p.rung}" if p.rung >= 0 and p.reason else "")
    ),
    "trial_length_set": lambda p: f"trial {p.trial_id} to train to {p.length} (rung {p.rung})",
    "trial_validation_reported": lambda p: (
        f"trial {p.trial_id} validated at {p.steps_completed} batches: {_metrics(p.metrics_json)}"
    ),
    "trial_status_reported": lambda p: f"trial {p.trial_id}: {p.status}",
    "trial_early_exit_reported": lambda p: f"trial {p.trial_id} exits early",
    "trial_metadata_set": lambda p: f"trial {p.trial_id} metadata set",
    "checkpoint_reported": lambda p: (
        f"checkpoint {_short(p.uuid)} of trial {p.trial_id} at {p.steps_completed} batches"
        f" ({_plural(len(p.resources), 'file')}, {sum(p.resources.values())} bytes)"
    ),
    "agent_registered": lambda p: (
        f"agent {p.agent_id} registered: {_plural(len(p.slots), 'slot')} in pool {p.resource_pool or 'default'}"
    ),
    "agent_lost": lambda p: f"agent {p.agent_id} lost",
    "agent_disabled": lambda p: f"agent {p.agent_id} disabled" + (" (draining)" if p.drain else ""),
    "agent_enabled": lambda p: f"agent {p.agent_id} enabled",
    "slot_disabled": lambda p: (
        f"slot {p.slot_id} of agent {p.agent_id} disabled" + (" (draining)" if p.drain else "")
    ),
    "slot_enabled": lambda p: f"slot {p.slot_id} of agent {p.agent_id} enabled",
    "job_resources_changed": _job_resources,
    "allocation_requested": _allocation_requested,
    "allocation_assigned": lambda p: f"allocation {p.allocation_id} assigned to {_placements(p)}",
    "allocation_started": lambda p: f"allocation {p.allocation_id} started on {p.agent_id} (pid {p.pid})",
    "allocation_ready": lambda p: f"allocation {p.allocation_id} ready at {p.proxy_address}",
    "allocation_kill_requested": lambda p: f"kill of allocation {p.allocation_id} asked",
    "allocation_stop_requested": lambda p: f"allocation {p.allocation_id} asked to stop",
    "allocation_stop_withdrawn": lambda p: f"stop of allocation {p.allocation_id} withdrawn",
    "allocation_stop_acknowledged": lambda p: f"allocation {p.allocation_id} acknowledged the stop",
    "allocation_canceled": lambda p: f"allocation {p.allocation_id} canceled before it got slots",
    "allocation_exited": lambda p: f"allocation {p.allocation_id} {_exit(p)}",
    "allocation_resources_exited": lambda p: f"allocation {p.allocation_id} on {p.agent_id} {_exit(p)}",
    "experiment_delete_requested": lambda p: f"deletion of experiment {p.experiment_id} asked",
    "experiment_deleted": lambda p: f"experiment {p.experiment_id} deleted",
    "experiment_delete_failed": lambda p: f"deletion of experiment {p.experiment_id} failed",
    "checkpoint_gc_policy_changed": lambda p: (
        f"experiment {p.experiment_id} GC policy: save_experiment_best={p.save_experiment_best}"
        f" save_trial_best={p.save_trial_best} save_trial_latest={p.save_trial_latest}"
    ),
    "checkpoint_delete_asked": lambda p: (
        f"deletion of {_plural(len(p.uuids), 'checkpoint')} of experiment {p.experiment_id} asked by {p.asked_by}"
        + (f" (files matching {', '.join(p.globs)})" if p.globs else "")
    ),
    "checkpoint_deletion_requested": lambda p: (
        f"{_plural(len(p.uuids), 'checkpoint')} of experiment {p.experiment_id} to delete ({p.bytes} bytes)"
    ),
    "checkpoint_deleted": lambda p: f"checkpoint {_short(p.uuid)} deleted ({p.bytes_freed} bytes freed)",
    "checkpoint_partially_deleted": lambda p: (
        f"checkpoint {_short(p.uuid)} partly deleted: {_plural(len(p.remaining), 'file')} left"
    ),
    "tensorboard_files_deleted": _tensorboard_files_deleted,
    "checkpoint_metadata_set": lambda p: f"metadata of checkpoint {_short(p.uuid)} set",
    "trial_used_checkpoint": lambda p: f"trial {p.trial_id} uses checkpoint {_short(p.checkpoint_uuid)}",
    "model_created": lambda p: f"model {p.name!r} created by {p.owner}",
    "model_version_registered": lambda p: (
        f"checkpoint {_short(p.checkpoint_uuid)} registered as {p.model_name!r} version {p.version}"
    ),
    "user_created": _user_created,
    "user_updated": _user_updated,
    "user_password_changed": lambda p: f"password of user {p.user_id} changed",
    "user_session_started": lambda p: f"user {p.user_id} logged in",
    "user_session_revoked": lambda p: f"user {p.user_id} logged out",
    "user_login_failed": lambda p: f"login as {p.username!r} from {p.address} failed",
}
