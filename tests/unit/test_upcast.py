"""Reading old-shape events as today's (services/common/upcast.py), on
hand-made events and on the recorded golden log."""

import json

import pytest
from google.protobuf.message import Message
from support.golden_log import golden_log

from determined.proto import events_pb2 as ev
from services.agent.core import AgentCore
from services.common.decider import Core
from services.common.envelope import Append, Envelope, payload_field, payload_of, wrap
from services.common.upcast import TRIAL_TASK, upcast
from services.scheduler.core import SchedulerCore
from services.searcher.lifecycle import TrialLifecycleCore

TS = ev.TrialState
GOLDEN = "three_experiments.jsonl"


def old_assigned(**changes: object) -> ev.AllocationAssigned:
    fields: dict[str, object] = {
        "allocation_id": "12.3",
        "trial_id": 12,
        "experiment_id": 7,
        "agent_id": "host-a",
        "slot_ids": [2, 3],
        "trial_run_id": 3,
        "config_json": '{"max_restarts": 1}',
        "hparams_json": '{"lr": 0.1}',
        "context_hash": "ctx",
        "trial_seed": 99,
        "latest_checkpoint": "ck-uuid",
        "steps_completed": 400,
        "owner": "alice",
        **changes,
    }
    return ev.AllocationAssigned(**fields)


def stored(payload: Message, event_id: str = "allocation-assigned-12.3") -> Envelope:
    append = Append(
        "allocation/12.3", payload, event_id, causation_id="trial-created-12", correlation_id="create-7"
    )
    return wrap(append, actor="service:scheduler", occurred_at_ns=1234)


def test_an_old_assignment_reads_as_a_request_then_an_assignment() -> None:
    envelope = stored(old_assigned())
    original = Envelope()
    original.CopyFrom(envelope)
    requested_envelope, assigned_envelope = upcast(envelope)
    assert envelope == original  # the stored event is not touched

    assert requested_envelope.WhichOneof("payload") == "allocation_requested"
    assert requested_envelope.event_id == "allocation-assigned-12.3~requested"
    for name in ("aggregate", "occurred_at_ns", "actor", "correlation_id", "causation_id"):
        assert getattr(requested_envelope, name) == getattr(envelope, name), name
        assert getattr(assigned_envelope, name) == getattr(envelope, name), name
    request = requested_envelope.allocation_requested
    assert (request.allocation_id, request.task_id, request.task_type) == ("12.3", "12", TRIAL_TASK)
    assert (request.slots, request.job_id, request.weight, request.owner) == (2, "experiment/7", 1.0, "alice")
    assert (request.resource_pool, request.priority, request.max_slots) == ("", 0, 0)
    assert request.WhichOneof("spec") == "trial"
    assert request.trial == ev.TrialLaunch(
        experiment_id=7,
        trial_id=12,
        trial_run_id=3,
        config_json='{"max_restarts": 1}',
        hparams_json='{"lr": 0.1}',
        context_hash="ctx",
        trial_seed=99,
        latest_checkpoint="ck-uuid",
        steps_completed=400,
        owner="alice",
    )

    assert assigned_envelope.event_id == envelope.event_id
    assert assigned_envelope.allocation_assigned == ev.AllocationAssigned(
        allocation_id="12.3",
        task_id="12",
        placements=[ev.Placement(agent_id="host-a", slot_ids=[2, 3])],
    )


def test_an_old_zero_slot_assignment_reads_as_a_zero_slot_request() -> None:
    requested_envelope, assigned_envelope = upcast(stored(old_assigned(slot_ids=[])))
    assert requested_envelope.allocation_requested.slots == 0
    [placement] = assigned_envelope.allocation_assigned.placements
    assert (placement.agent_id, list(placement.slot_ids)) == ("host-a", [])


@pytest.mark.parametrize(
    "payload",
    [
        ev.AllocationAssigned(
            allocation_id="12.3", task_id="12", placements=[ev.Placement(agent_id="a", slot_ids=[0])]
        ),
        ev.AllocationRequested(
            allocation_id="12.3", task_id="12", slots=1, trial=ev.TrialLaunch(trial_id=12)
        ),
        ev.AllocationExited(allocation_id="12.3", trial_id=12, exit_code=1),
        ev.TrialCreated(trial_id=12, experiment_id=7),
        ev.ExperimentCreated(experiment_id=7, config_json="{}"),
    ],
    ids=lambda payload: type(payload).__name__,
)
def test_events_of_todays_shapes_read_as_they_are(payload: Message) -> None:
    envelope = stored(payload)
    [same] = upcast(envelope)
    assert same == envelope


def test_an_unknown_payload_reads_as_it_is() -> None:
    envelope = Envelope(event_id="from-the-future", aggregate="thing/1")
    assert upcast(envelope) == [envelope]


def test_upcasting_is_stable() -> None:
    once = upcast(stored(old_assigned()))
    assert [e for envelope in once for e in upcast(envelope)] == once


# -- the golden log ---------------------------------------------------------------


def test_every_old_assignment_of_the_golden_log_reads_as_two_events() -> None:
    log = golden_log(GOLDEN)
    old = [e for e in log if e.WhichOneof("payload") == "allocation_assigned"]
    assert [e.allocation_assigned.allocation_id for e in old] == ["1.1", "2.1", "2.2", "3.1"]
    created = {
        e.experiment_created.experiment_id: e.experiment_created
        for e in log
        if e.WhichOneof("payload") == "experiment_created"
    }
    trials = {
        e.trial_created.trial_id: e.trial_created for e in log if e.WhichOneof("payload") == "trial_created"
    }
    upcast_log = [u for e in log for u in upcast(e)]
    assert len(upcast_log) == len(log) + len(old)
    for envelope in log:
        read = upcast(envelope)
        if envelope.WhichOneof("payload") != "allocation_assigned":
            assert read == [envelope]
            continue
        was = envelope.allocation_assigned
        requested_envelope, assigned_envelope = read
        assert requested_envelope.event_id == f"{envelope.event_id}~requested"
        assert assigned_envelope.event_id == envelope.event_id
        assert (
            requested_envelope.aggregate == assigned_envelope.aggregate == f"allocation/{was.allocation_id}"
        )
        request, assigned = requested_envelope.allocation_requested, assigned_envelope.allocation_assigned
        assert (request.allocation_id, request.task_id) == (was.allocation_id, str(was.trial_id))
        assert (request.task_type, request.slots, request.job_id) == (
            "TRIAL",
            1,
            f"experiment/{was.experiment_id}",
        )
        assert (request.weight, request.owner) == (1.0, "determined")
        launch = request.trial
        experiment, trial = created[was.experiment_id], trials[was.trial_id]
        assert (launch.experiment_id, launch.trial_id, launch.trial_run_id) == (
            was.experiment_id,
            was.trial_id,
            int(was.allocation_id.split(".")[1]),
        )
        assert json.loads(launch.config_json) == json.loads(experiment.config_json)
        assert (launch.hparams_json, launch.trial_seed) == (trial.hparams_json, trial.trial_seed)
        assert (launch.context_hash, launch.owner) == (experiment.context_hash, experiment.owner)
        assert (launch.latest_checkpoint, launch.steps_completed, launch.searcher_length) == ("", 0, 0)
        assert (assigned.allocation_id, assigned.task_id) == (was.allocation_id, str(was.trial_id))
        assert [(p.agent_id, list(p.slot_ids)) for p in assigned.placements] == [("vm", [0])]
        assert (assigned.trial_id, assigned.config_json, assigned.agent_id, list(assigned.slot_ids)) == (
            0,
            "",
            "",
            [],
        )


@pytest.mark.parametrize(
    "core",
    [SchedulerCore(), AgentCore(agent_id="vm"), TrialLifecycleCore()],
    ids=lambda core: type(core).__name__,
)
def test_the_upcast_golden_log_leaves_nothing_to_decide(core: Core[object]) -> None:
    state = core.initial_state()
    for envelope in golden_log(GOLDEN):
        state = core.evolve(state, envelope)
    assert core.decide(state) == []


def test_the_lifecycle_decides_what_the_old_scheduler_did() -> None:
    """Replayed event by event, the lifecycle asks for the runs the old
    scheduler assigned (the same launch), kills what it killed, and ends the
    trials as it did."""
    core = TrialLifecycleCore()
    state = core.initial_state()
    log = golden_log(GOLDEN)
    decided: list[tuple[int, Append]] = []
    for position, envelope in enumerate(log):
        state = core.evolve(state, envelope)
        decided += [(position, append) for append in core.decide(state)]
    for position, append in decided:
        # Each decision is answered by the next event of its aggregate in the log.
        answer = next(u for e in log[position + 1 :] for u in upcast(e) if u.aggregate == append.aggregate)
        got = payload_of(answer)
        match append.payload:
            case ev.AllocationRequested() as request:
                assert isinstance(got, ev.AllocationRequested), append.msg_id
                assert got.trial == request.trial, append.msg_id
                assert (got.allocation_id, got.task_id, got.slots) == (
                    request.allocation_id,
                    request.task_id,
                    request.slots,
                )
            case ev.TrialEnded() as end:
                assert isinstance(got, ev.TrialEnded), append.msg_id
                assert (got.trial_id, got.state) == (end.trial_id, end.state)
            case ev.AllocationKillRequested() as kill:
                assert isinstance(got, ev.AllocationKillRequested), append.msg_id
                assert (got.allocation_id, got.reason) == (kill.allocation_id, kill.reason)
            case _:
                raise AssertionError(f"unexpected decision {append.msg_id}")
    assert sorted({(payload_field(a.payload), a.aggregate) for _, a in decided}) == [
        ("allocation_kill_requested", "allocation/3.1"),
        ("allocation_requested", "allocation/1.1"),
        ("allocation_requested", "allocation/2.1"),
        ("allocation_requested", "allocation/2.2"),
        ("allocation_requested", "allocation/3.1"),
        ("trial_ended", "trial/1"),
        ("trial_ended", "trial/2"),
        ("trial_ended", "trial/3"),
    ]
    ends = {
        a.payload.trial_id: (a.payload.state, a.payload.reason)
        for _, a in decided
        if payload_field(a.payload) == "trial_ended"
    }
    assert ends == {
        1: (TS.TRIAL_STATE_COMPLETED, ""),
        2: (TS.TRIAL_STATE_ERROR, "allocation 2.2 exited with code 3 (restarted 1 of 1 times)"),
        3: (TS.TRIAL_STATE_CANCELED, "experiment killed"),
    }
