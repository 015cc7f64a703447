"""The scheduler's pure core: given events, then the appends it decides."""

import json

from google.protobuf.message import Message

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, payload_field, wrap
from services.scheduler.core import SchedulerCore, SchedulerState

TS = ev.TrialState
core = SchedulerCore()


def given(*payloads: Message, state: SchedulerState | None = None) -> SchedulerState:
    state = state or core.initial_state()
    for n, payload in enumerate(payloads):
        envelope = wrap(Append("x/1", payload, f"given-{n}"), actor="test", occurred_at_ns=0)
        state = core.evolve(state, envelope)
    return state


def settle(state: SchedulerState) -> tuple[SchedulerState, list[Append]]:
    """Decides and folds until nothing more is decided, like the Shell."""
    decided: list[Append] = []
    while appends := core.decide(state):
        decided += appends
        state = given(*[a.payload for a in appends], state=state)
    return state, decided


def kinds(appends: list[Append]) -> list[str]:
    return [payload_field(a.payload) for a in appends]


def experiment(experiment_id: int = 1, **config: object) -> ev.ExperimentCreated:
    return ev.ExperimentCreated(
        experiment_id=experiment_id,
        owner="alice",
        config_json=json.dumps(config),
        context_hash="abc",
        activate=True,
    )


def trial(trial_id: int, experiment_id: int = 1) -> ev.TrialCreated:
    return ev.TrialCreated(
        trial_id=trial_id, experiment_id=experiment_id, hparams_json='{"lr": 1}', trial_seed=7
    )


def agent(agent_id: str = "a", slots: int = 1) -> ev.AgentRegistered:
    return ev.AgentRegistered(agent_id=agent_id, slots=[ev.Slot(slot_id=i, type="cpu") for i in range(slots)])


def exited(allocation_id: str, code: int = 0, **extra: object) -> ev.AllocationExited:
    trial_id = int(allocation_id.split(".")[0])
    return ev.AllocationExited(allocation_id=allocation_id, trial_id=trial_id, exit_code=code, **extra)


def test_assigns_a_trial_to_an_agent_with_every_spec_field() -> None:
    state = given(
        experiment(max_restarts=2),
        trial(5),
        agent(),
        ev.CheckpointReported(uuid="old", trial_id=5, steps_completed=10),
        ev.CheckpointReported(uuid="new", trial_id=5, steps_completed=20),
        ev.CheckpointReported(uuid="late-but-older", trial_id=5, steps_completed=15),
    )
    [append] = core.decide(state)
    assigned = append.payload
    assert isinstance(assigned, ev.AllocationAssigned)
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        "allocation/5.1",
        "allocation-assigned-5.1",
        0,
    )
    assert assigned.allocation_id == "5.1" and assigned.trial_run_id == 1
    assert (assigned.agent_id, list(assigned.slot_ids)) == ("a", [0])
    assert json.loads(assigned.config_json) == {"max_restarts": 2}
    assert (assigned.hparams_json, assigned.trial_seed, assigned.context_hash) == ('{"lr": 1}', 7, "abc")
    assert (assigned.latest_checkpoint, assigned.steps_completed, assigned.owner) == ("new", 20, "alice")


def test_nothing_is_assigned_without_an_agent() -> None:
    assert core.decide(given(experiment(), trial(1))) == []


def test_first_come_first_served_and_slots_are_released_on_exit() -> None:
    state, appends = settle(given(experiment(), trial(1), trial(2), agent(slots=1)))
    assert [a.msg_id for a in appends] == ["allocation-assigned-1.1"]
    state, appends = settle(given(exited("1.1"), state=state))
    assert [a.msg_id for a in appends] == ["trial-ended-1", "allocation-assigned-2.1"]
    assert appends[0].payload.state == TS.TRIAL_STATE_COMPLETED


def test_a_trial_that_does_not_fit_blocks_the_ones_behind_it() -> None:
    state = given(experiment(1, resources={"slots_per_trial": 2}), experiment(2), agent(slots=2))
    state, appends = settle(given(trial(1), state=state))
    state, appends = settle(given(trial(2, experiment_id=1), trial(3, experiment_id=2), state=state))
    assert appends == []
    state, appends = settle(given(exited("1.1"), state=state))
    assert [a.msg_id for a in appends] == ["trial-ended-1", "allocation-assigned-2.1"]
    assert list(appends[1].payload.slot_ids) == [0, 1]


def test_a_trial_no_agent_could_hold_does_not_block_others() -> None:
    state = given(
        experiment(1, resources={"slots_per_trial": 8}), experiment(2), agent(slots=2), trial(1), trial(2, 2)
    )
    assert [a.msg_id for a in core.decide(state)] == ["allocation-assigned-2.1"]


def test_zero_slot_trials_need_no_free_slot() -> None:
    state = given(experiment(1, resources={"slots_per_trial": 0}), agent(slots=1), experiment(2), trial(2, 2))
    state = given(trial(1), state=state)
    appends = core.decide(state)
    assert [a.msg_id for a in appends] == ["allocation-assigned-2.1", "allocation-assigned-1.1"]
    assert list(appends[1].payload.slot_ids) == []


def test_slots_go_to_the_agent_that_has_them() -> None:
    state = given(experiment(resources={"slots_per_trial": 2}), agent("a", 1), agent("b", 2), trial(1))
    [append] = core.decide(state)
    assert append.payload.agent_id == "b"


def test_failures_restart_until_max_restarts_then_error() -> None:
    state, _ = settle(given(experiment(max_restarts=1), agent(), trial(1)))
    state, appends = settle(given(exited("1.1", 3), state=state))
    assert [a.msg_id for a in appends] == ["allocation-assigned-1.2"]
    assert appends[0].payload.trial_run_id == 2
    state, appends = settle(given(exited("1.2", 3), state=state))
    assert [a.msg_id for a in appends] == ["trial-ended-1"]
    assert appends[0].payload.state == TS.TRIAL_STATE_ERROR
    assert "exited with code 3" in appends[0].payload.reason


def test_max_restarts_defaults_to_five_and_an_error_counts_as_failure() -> None:
    state, _ = settle(given(experiment(), agent(), trial(1)))
    for run in range(1, 7):
        state, appends = settle(
            given(exited(f"1.{run}", 1 if run % 2 else 0, error="" if run % 2 else "bad"), state=state)
        )
    assert [a.msg_id for a in appends] == ["trial-ended-1"]
    assert appends[0].payload.state == TS.TRIAL_STATE_ERROR and "bad" in appends[0].payload.reason


def test_an_agent_restart_exit_is_retried() -> None:
    state, _ = settle(given(experiment(), agent(), trial(1)))
    state = given(agent(), state=state)  # re-registered: its allocation is still open until it says so
    assert core.decide(state) == []
    state, appends = settle(given(exited("1.1", -1, error="agent restarted"), state=state))
    assert [a.msg_id for a in appends] == ["allocation-assigned-1.2"]


def test_kill_cancels_pending_trials_and_kills_running_ones() -> None:
    state, _ = settle(given(experiment(), agent(slots=1), trial(1), trial(2)))
    state, appends = settle(given(ev.ExperimentKillRequested(experiment_id=1), state=state))
    assert kinds(appends) == ["allocation_kill_requested", "trial_ended"]
    assert appends[0].payload.allocation_id == "1.1" and appends[0].payload.agent_id == "a"
    assert appends[1].payload.trial_id == 2 and appends[1].payload.state == TS.TRIAL_STATE_CANCELED
    state, appends = settle(given(exited("1.1", -15, killed=True), state=state))
    assert [(a.msg_id, a.payload.state) for a in appends] == [("trial-ended-1", TS.TRIAL_STATE_CANCELED)]


def test_a_failure_of_a_killed_experiment_is_not_retried() -> None:
    state, _ = settle(given(experiment(), agent(), trial(1)))
    state, _ = settle(given(ev.ExperimentKillRequested(experiment_id=1), state=state))
    state, appends = settle(given(exited("1.1", 1), state=state))
    assert [(a.msg_id, a.payload.state) for a in appends] == [("trial-ended-1", TS.TRIAL_STATE_CANCELED)]


def test_a_trial_created_after_the_kill_is_canceled_at_once() -> None:
    state, _ = settle(given(experiment(), agent(), ev.ExperimentKillRequested(experiment_id=1)))
    state, appends = settle(given(trial(4), state=state))
    assert [(a.msg_id, a.payload.state) for a in appends] == [("trial-ended-4", TS.TRIAL_STATE_CANCELED)]


def test_replaying_a_whole_history_decides_nothing_again() -> None:
    history: list[Message] = [experiment(max_restarts=1), agent(), trial(1), trial(2)]
    state, appends = settle(given(*history))
    history += [a.payload for a in appends]
    for event in [exited("1.1", 2), exited("1.2", 2), exited("2.1", 0)]:
        state, appends = settle(given(event, state=state))
        history += [event, *[a.payload for a in appends]]
    assert core.decide(given(*history)) == []
    assert kinds(appends) == ["trial_ended"]
