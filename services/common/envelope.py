"""The event envelope: building one, naming its subject, reading its payload.

An aggregate is written "<kind>/<id>" (experiment/7, allocation/12.1); its
subject is "<namespace>.events.<kind>.<id>". The namespace is "det" on a real
cluster; tests give each test its own namespace so they share one server.
"""

from dataclasses import dataclass

from google.protobuf.message import Message

from determined.proto import events_pb2

Envelope = events_pb2.Envelope


@dataclass(frozen=True)
class Append:
    """A decision to append one event: what a pure core returns.

    `msg_id` is derived from the cause, so appending it twice stores it once.
    `expected_version`, when set, is the aggregate's last per-subject sequence
    the decision was made against (0 = the aggregate must not exist yet).
    """

    aggregate: str
    payload: Message
    msg_id: str
    expected_version: int | None = None
    causation_id: str = ""
    correlation_id: str = ""


def aggregate(kind: str, aggregate_id: object) -> str:
    return f"{kind}/{aggregate_id}"


def subject_for(namespace: str, aggregate_name: str) -> str:
    kind, _, aggregate_id = aggregate_name.partition("/")
    return f"{namespace}.events.{kind}.{aggregate_id}"


def payload_field(payload: Message) -> str:
    """The Envelope oneof field that holds a payload of this message type."""
    return _FIELD_BY_TYPE[payload.DESCRIPTOR.full_name]


def wrap(append: Append, *, actor: str, occurred_at_ns: int) -> Envelope:
    """Wraps a decided append in an envelope; the event id is its message id."""
    envelope = Envelope(
        event_id=append.msg_id,
        aggregate=append.aggregate,
        occurred_at_ns=occurred_at_ns,
        actor=actor,
        correlation_id=append.correlation_id or append.msg_id,
        causation_id=append.causation_id,
    )
    getattr(envelope, payload_field(append.payload)).CopyFrom(append.payload)
    return envelope


def payload_of(envelope: Envelope) -> Message | None:
    """The typed payload, or None for an event type this code does not know."""
    field = envelope.WhichOneof("payload")
    return None if field is None else getattr(envelope, field)


_FIELD_BY_TYPE: dict[str, str] = {
    field.message_type.full_name: field.name for field in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields
}


# Every event type (its Envelope oneof field) and the kind of aggregate whose
# subject it is appended to. A core reads the kinds of every event it folds
# (tests/unit/test_subject_kinds.py checks this for each core).
SUBJECT_KINDS: dict[str, str] = {
    "experiment_created": "experiment",
    "experiment_state_changed": "experiment",
    "experiment_kill_requested": "experiment",
    "experiment_progress_changed": "experiment",
    "experiment_cancel_requested": "experiment",
    "experiment_archive_set": "experiment",
    "experiment_details_set": "experiment",
    "experiment_continued": "experiment",
    "trial_created": "trial",
    "trial_ended": "trial",
    "trial_reopened": "trial",
    "unmanaged_trial_heartbeat": "trial",
    "unmanaged_trial_exited": "trial",
    "trial_progress_reported": "trial",
    "trial_kill_requested": "trial",
    "trial_stop_requested": "trial",
    "trial_length_set": "trial",
    "trial_status_reported": "trial",
    "trial_early_exit_reported": "trial",
    "trial_metadata_set": "trial",
    "trial_validation_reported": "validation",
    "trial_metrics_reported": "metrics",
    "checkpoint_reported": "checkpoint",
    "agent_registered": "agent",
    "agent_lost": "agent",
    "agent_disabled": "agent",
    "agent_enabled": "agent",
    "slot_disabled": "agent",
    "slot_enabled": "agent",
    # A job's aggregate is its own: an experiment's is "experiment/<id>".
    "job_resources_changed": "experiment",
    "allocation_requested": "allocation",
    "allocation_assigned": "allocation",
    "allocation_started": "allocation",
    "allocation_stop_requested": "allocation",
    "allocation_stop_acknowledged": "allocation",
    "allocation_stop_withdrawn": "allocation",
    "allocation_kill_requested": "allocation",
    "allocation_canceled": "allocation",
    "allocation_exited": "allocation",
    "allocation_resources_exited": "allocation",
    "allocation_ready": "allocation",
    "experiment_delete_requested": "experiment",
    "experiment_deleted": "experiment",
    "experiment_delete_failed": "experiment",
    "checkpoint_gc_policy_changed": "experiment",
    "checkpoint_delete_asked": "experiment",
    "checkpoint_deletion_requested": "experiment",
    "checkpoint_deleted": "checkpoint",
    "checkpoint_partially_deleted": "checkpoint",
    "tensorboard_files_deleted": "experiment",
    "checkpoint_metadata_set": "checkpoint",
    "trial_used_checkpoint": "trial",
    "model_created": "model",
    "model_version_registered": "model",
    "user_created": "user",
    "user_updated": "user",
    "user_password_changed": "user",
    "user_session_started": "user",
    "user_session_revoked": "user",
    "user_login_failed": "user",
}


def subject_kind(payload: Message) -> str:
    """The aggregate kind an event of this type is appended under."""
    return SUBJECT_KINDS[payload_field(payload)]


def kinds_of(folds: tuple[str, ...]) -> list[str]:
    """The aggregate kinds a core must read to see every event type it folds."""
    return sorted({SUBJECT_KINDS[event_type] for event_type in folds})
