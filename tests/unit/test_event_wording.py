"""wording.py: every event type in one readable line, its reason, and the
payload redacted; an unreadable event worded, never raised."""

import json

import pytest

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.gateway.features.events.wording import SUMMARIES, logged_event

PAYLOAD_TYPES = [field.name for field in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields]


def stored(field: str, payload: object, sequence: int = 9, **envelope: str) -> StoredEvent:
    wrapped = Envelope(
        event_id="e-9", aggregate="trial/7", occurred_at_ns=5, actor="service:searcher", **envelope
    )
    getattr(wrapped, field).CopyFrom(payload)
    return StoredEvent(sequence, wrapped, caught_up=False)


def test_every_event_type_has_its_line() -> None:
    assert sorted(SUMMARIES) == sorted(PAYLOAD_TYPES)


@pytest.mark.parametrize("field", PAYLOAD_TYPES)
def test_an_empty_event_of_each_type_is_worded(field: str) -> None:
    payload = getattr(Envelope(), field).__class__()
    event = logged_event(stored(field, payload))
    assert event.type == field and event.summary and "\n" not in event.summary


def test_the_envelope_fields_and_the_cause_found() -> None:
    payload = events_pb2.TrialStopRequested(
        trial_id=7, reason="cut at rung 0 (0.81 not in the top 1/4 of 8)", rung=0
    )
    event = logged_event(stored("trial_stop_requested", payload, causation_id="v-3", correlation_id="c"), 4)
    assert (event.sequence, event.occurred_at_ns, event.aggregate, event.actor) == (
        9,
        5,
        "trial/7",
        "service:searcher",
    )
    assert (event.event_id, event.causation_id, event.causation_sequence, event.correlation_id) == (
        "e-9",
        "v-3",
        4,
        "c",
    )
    assert event.summary == "trial 7 to stop at rung 0"
    assert event.reason == "cut at rung 0 (0.81 not in the top 1/4 of 8)"
    assert json.loads(event.payload_json) == {"trial_id": "7", "reason": payload.reason}


@pytest.mark.parametrize(
    ("field", "payload", "summary", "reason"),
    [
        (
            "allocation_exited",
            events_pb2.AllocationExited(
                allocation_id="7.2", exit_code=1, error="bad context", agent_lost=True
            ),
            "allocation 7.2 exited 1 (agent lost)",
            "bad context",
        ),
        (
            "allocation_assigned",
            events_pb2.AllocationAssigned(
                allocation_id="7.1",
                placements=[
                    events_pb2.Placement(agent_id="a1", slot_ids=[0, 1]),
                    events_pb2.Placement(agent_id="a2", slot_ids=[0]),
                ],
                reason="fair share",
            ),
            "allocation 7.1 assigned to a1 slots 0,1; a2 slot 0",
            "fair share",
        ),
        (
            "allocation_assigned",  # a log from before gangs: one agent, inline
            events_pb2.AllocationAssigned(allocation_id="7.1", agent_id="a1", slot_ids=[3], config_json="{}"),
            "allocation 7.1 assigned to a1 slot 3",
            "",
        ),
        (
            "trial_validation_reported",
            events_pb2.TrialValidationReported(
                trial_id=7, steps_completed=58, metrics_json='{"loss": 0.123456, "a": 1, "b": 2, "c": 3}'
            ),
            "trial 7 validated at 58 batches: loss=0.1235 a=1 b=2 (+1 more)",
            "",
        ),
        (
            "experiment_state_changed",
            events_pb2.ExperimentStateChanged(
                experiment_id=3, state=events_pb2.EXPERIMENT_STATE_PAUSED, reason="paused by alice"
            ),
            "experiment 3 PAUSED",
            "paused by alice",
        ),
        (
            "job_resources_changed",
            events_pb2.JobResourcesChanged(job_id="experiment/3", priority=5),
            "job experiment/3: priority=5",
            "",
        ),
        (
            "user_login_failed",
            events_pb2.UserLoginFailed(
                user_id=3, username="alice", address="10.0.0.1", reason="wrong password"
            ),
            "login as 'alice' from 10.0.0.1 failed",
            "wrong password",
        ),
        (
            "allocation_requested",
            events_pb2.AllocationRequested(
                allocation_id="7.1",
                slots=2,
                trial=events_pb2.TrialLaunch(trial_id=7, trial_run_id=1),
                reason="trial 7's first run",
            ),
            "allocation 7.1 requested: 2 slots in pool default for trial 7 run 1",
            "trial 7's first run",
        ),
        (
            "tensorboard_files_deleted",
            events_pb2.TensorboardFilesDeleted(experiment_id=3, delete_request=1, bytes_freed=640),
            "TensorBoard files of experiment 3 deleted (640 bytes freed)",
            "",
        ),
        (
            "tensorboard_files_deleted",
            events_pb2.TensorboardFilesDeleted(
                experiment_id=3, remaining={"trial/1/events.out": 64}, error="trial/1/events.out: denied"
            ),
            "TensorBoard files of experiment 3 partly deleted: 1 file left",
            "trial/1/events.out: denied",
        ),
        (
            "tensorboard_files_deleted",
            events_pb2.TensorboardFilesDeleted(experiment_id=3, error="s3://bucket: NoSuchBucket"),
            "TensorBoard files of experiment 3 not deleted",
            "s3://bucket: NoSuchBucket",
        ),
    ],
)
def test_lines_and_reasons(field: str, payload: object, summary: str, reason: str) -> None:
    event = logged_event(stored(field, payload))
    assert (event.summary, event.reason) == (summary, reason)


def test_the_payload_is_redacted() -> None:
    created = events_pb2.UserCreated(user_id=3, username="alice", password_hash="$2b$10$xyz")
    config = json.dumps({"checkpoint_storage": {"type": "s3", "secret_key": "s3cr3t"}})
    deletion = events_pb2.CheckpointDeletionRequested(experiment_id=1, storage_json=config)
    for field, payload in (("user_created", created), ("checkpoint_deletion_requested", deletion)):
        text = logged_event(stored(field, payload)).SerializeToString()
        assert b"$2b$" not in text and b"s3cr3t" not in text


def test_an_unreadable_event_is_worded_with_why() -> None:
    event = logged_event(StoredEvent(12, Envelope(), caught_up=True, skipped="bytes that are no envelope"))
    assert (event.sequence, event.type, event.summary) == (
        12,
        "",
        "unreadable event: bytes that are no envelope",
    )
