"""Whether a stored or decided event is one this code can read: the one
check every reader of the log and every append makes (pure, no I/O).

Anyone who holds a part's NATS password can publish on that part's subjects
without our client, so what is stored may be anything: bytes that are no
envelope, an envelope of a type this code does not know, or one that claims
to be about an aggregate other than the subject it was published on (the
subject is what nats-server's permissions check; the envelope is what the
cores trust). A reader skips such an event, says so once and goes on
(`skips.py`); an append refuses to store one.

A well-formed event:
- is at most MAX_EVENT_BYTES and decodes as an Envelope;
- has an event id and a payload of a type this code knows;
- names an aggregate "<kind>/<id>" whose kind is its type's (SUBJECT_KINDS; a
  job's change: its job's, _JOB_KINDS) and whose id is the one its payload
  names (AGGREGATE_ID);
- when its subject is known, was stored on that aggregate's subject.
"""

import re
from collections.abc import Callable

from google.protobuf.message import DecodeError, Message

from determined.common.limits import MAX_EVENT_BYTES
from services.common.envelope import SUBJECT_KINDS, Envelope

# The longest event id and aggregate name an event may carry.
MAX_NAME_CHARS = 512


# What an aggregate id must not hold, to be the tail of a NATS subject: a blank, an
# empty token, or a wildcard token.
_NOT_SUBJECT_TAIL = re.compile(r"\s|^\.|\.$|\.\.|(?:^|\.)[*>](?:\.|$)")


class MalformedEventError(ValueError):
    """An event that is not well-formed: the message says why."""


def _field(name: str) -> Callable[[Message], str]:
    def value(payload: Message) -> str:
        found = getattr(payload, name)
        return str(found) if found else ""  # 0 and "" name no aggregate

    return value


_EXPERIMENT, _TRIAL, _ALLOCATION = _field("experiment_id"), _field("trial_id"), _field("allocation_id")
_AGENT, _USER, _UUID = _field("agent_id"), _field("user_id"), _field("uuid")


# The aggregate kind a job's changes are stored under, by the job's kind: an
# experiment's on the experiment ("experiment/7"), a task's (a notebook's, ...)
# on its one allocation ("allocation/<task id>.1"), which the scheduler reads.
_JOB_KINDS = {"experiment": "experiment", "task": "allocation"}


def _job_id(payload: Message) -> str:
    kind, _, job = str(payload.job_id).partition("/")
    if kind == "task" and job:
        return f"{job}.1"
    return job if kind == "experiment" else ""


def _kind_of(event_type: str, payload: Message) -> str:
    """The aggregate kind an event is stored under: its type's (SUBJECT_KINDS),
    but a job's change goes with its job (_JOB_KINDS)."""
    if event_type == "job_resources_changed":
        return _JOB_KINDS.get(str(payload.job_id).partition("/")[0], SUBJECT_KINDS[event_type])
    return SUBJECT_KINDS[event_type]


# The id in the payload of each event type that its aggregate's id must equal.
AGGREGATE_ID: dict[str, Callable[[Message], str]] = {
    "experiment_created": _EXPERIMENT,
    "experiment_state_changed": _EXPERIMENT,
    "experiment_kill_requested": _EXPERIMENT,
    "experiment_progress_changed": _EXPERIMENT,
    "experiment_cancel_requested": _EXPERIMENT,
    "experiment_archive_set": _EXPERIMENT,
    "experiment_details_set": _EXPERIMENT,
    "experiment_continued": _EXPERIMENT,
    "trial_created": _TRIAL,
    "trial_ended": _TRIAL,
    "trial_reopened": _TRIAL,
    "unmanaged_trial_heartbeat": _TRIAL,
    "unmanaged_trial_exited": _TRIAL,
    "trial_progress_reported": _TRIAL,
    "trial_kill_requested": _TRIAL,
    "trial_stop_requested": _TRIAL,
    "trial_length_set": _TRIAL,
    "trial_status_reported": _TRIAL,
    "trial_early_exit_reported": _TRIAL,
    "trial_metadata_set": _TRIAL,
    "trial_validation_reported": _TRIAL,
    "trial_metrics_reported": _TRIAL,
    "checkpoint_reported": _UUID,
    "agent_registered": _AGENT,
    "agent_lost": _AGENT,
    "agent_disabled": _AGENT,
    "agent_enabled": _AGENT,
    "slot_disabled": _AGENT,
    "slot_enabled": _AGENT,
    "job_resources_changed": _job_id,
    "allocation_requested": _ALLOCATION,
    "allocation_assigned": _ALLOCATION,
    "allocation_started": _ALLOCATION,
    "allocation_stop_requested": _ALLOCATION,
    "allocation_stop_acknowledged": _ALLOCATION,
    "allocation_stop_withdrawn": _ALLOCATION,
    "allocation_kill_requested": _ALLOCATION,
    "allocation_canceled": _ALLOCATION,
    "allocation_exited": _ALLOCATION,
    "allocation_resources_exited": _ALLOCATION,
    "allocation_ready": _ALLOCATION,
    "experiment_delete_requested": _EXPERIMENT,
    "experiment_deleted": _EXPERIMENT,
    "experiment_delete_failed": _EXPERIMENT,
    "checkpoint_gc_policy_changed": _EXPERIMENT,
    "checkpoint_delete_asked": _EXPERIMENT,
    "checkpoint_deletion_requested": _EXPERIMENT,
    "checkpoint_deleted": _UUID,
    "checkpoint_partially_deleted": _UUID,
    "tensorboard_files_deleted": _EXPERIMENT,
    "checkpoint_metadata_set": _UUID,
    "trial_used_checkpoint": _TRIAL,
    "model_created": _field("name"),
    "model_version_registered": _field("model_name"),
    "user_created": _USER,
    "user_updated": _USER,
    "user_password_changed": _USER,
    "user_session_started": _USER,
    "user_session_revoked": _USER,
    "user_login_failed": _USER,
}


def decoded(data: bytes, subject: str | None = None, namespace: str = "det") -> Envelope:
    """The envelope stored as `data` (on `subject`, when known), checked
    (`problem`); MalformedEventError naming what is wrong otherwise."""
    if len(data) > MAX_EVENT_BYTES:
        raise MalformedEventError(f"{len(data)} bytes, over the limit of {MAX_EVENT_BYTES}")
    try:
        envelope: Envelope = Envelope.FromString(data)
    except (DecodeError, ValueError, RecursionError) as error:
        raise MalformedEventError(f"not an event envelope ({type(error).__name__})") from None
    found = problem(envelope, subject, namespace)
    if found is not None:
        raise MalformedEventError(found)
    return envelope


def problem(envelope: Envelope, subject: str | None = None, namespace: str = "det") -> str | None:
    """What makes `envelope` not well-formed (see the module's docstring), or None."""
    event_type = envelope.WhichOneof("payload")
    if event_type is None or event_type not in SUBJECT_KINDS:
        return "no payload of a known event type (none, or one newer than this code)"
    if not envelope.event_id or len(envelope.event_id) > MAX_NAME_CHARS:
        return f"{event_type} without an event id (or one over {MAX_NAME_CHARS} characters)"
    kind, _, aggregate_id = envelope.aggregate.partition("/")
    expected_kind = _kind_of(event_type, getattr(envelope, event_type))
    if kind != expected_kind:
        return f"{event_type} on aggregate {envelope.aggregate!r}: its kind must be {expected_kind!r}"
    if not aggregate_id or len(envelope.aggregate) > MAX_NAME_CHARS or _NOT_SUBJECT_TAIL.search(aggregate_id):
        return f"{event_type} on aggregate {envelope.aggregate!r}: not a valid aggregate id"
    named = AGGREGATE_ID[event_type](getattr(envelope, event_type))
    if named != aggregate_id:
        return f"{event_type} on aggregate {envelope.aggregate!r} names {named or 'no'} id in its payload"
    if subject is not None and subject != f"{namespace}.events.{kind}.{aggregate_id}":  # subject_for's
        return f"{event_type} on aggregate {envelope.aggregate!r} stored on another subject ({subject})"
    return None
