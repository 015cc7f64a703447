"""The trial lifecycle's pure core: given events, then the appends it decides.

The last tests run the lifecycle beside the scheduler's and an agent's cores on
one log (with the store's expected-version check), the way the services meet.
"""

import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.protobuf.message import Message
from support import pure_core

from determined.proto import events_pb2 as ev
from services.agent.core import AgentCore
from services.common.decider import Core
from services.common.envelope import Append, Envelope, aggregate, payload_field, subject_kind, wrap
from services.scheduler.core import SchedulerCore
from services.searcher.lifecycle import LifecycleState, TrialLifecycleCore

ES, TS = ev.ExperimentState, ev.TrialState
core = TrialLifecycleCore()
_event_ids = itertools.count()

SEARCHER = {"name": "single", "metric": "loss", "max_length": {"batches": 100}}


# -- helpers ----------------------------------------------------------------------


def aggregate_of(payload: Message) -> str:
    kind = subject_kind(payload)
    key = {
        "experiment": "experiment_id",
        "trial": "trial_id",
        "allocation": "allocation_id",
        "agent": "agent_id",
        "checkpoint": "uuid",
        "metrics": "trial_id",
        "validation": "trial_id",
    }[kind]
    return aggregate(kind, getattr(payload, key))


def envelope(payload: Message) -> Envelope:
    append = Append(aggregate_of(payload), payload, f"given-{next(_event_ids)}")
    return wrap(append, actor="test", occurred_at_ns=0)


def given(*payloads: Message, state: LifecycleState | None = None) -> LifecycleState:
    state = state or core.initial_state()
    for payload in payloads:
        state = core.evolve(state, envelope(payload))
    return state


def settle(state: LifecycleState) -> tuple[LifecycleState, list[Append]]:
    return pure_core.settle(core, state, given)


def kinds(appends: list[Append]) -> list[str]:
    return [payload_field(a.payload) for a in appends]


def msg_ids(appends: list[Append]) -> list[str]:
    return [a.msg_id for a in appends]


def experiment(experiment_id: int = 1, activate: bool = True, **config: Any) -> ev.ExperimentCreated:
    searcher = {**SEARCHER, **config.pop("searcher", {})}
    full = {"searcher": searcher, "entrypoint": "python3 train.py", **config}
    return ev.ExperimentCreated(
        experiment_id=experiment_id,
        name=f"exp-{experiment_id}",
        owner="alice",
        config_json=json.dumps(full),
        context_hash=f"ctx-{experiment_id}",
        context_size=10,
        activate=activate,
    )


def trial(trial_id: int, experiment_id: int = 1, length: int = 0) -> ev.TrialCreated:
    return ev.TrialCreated(
        trial_id=trial_id,
        experiment_id=experiment_id,
        request_id=f"request-{trial_id}",
        hparams_json=json.dumps({"lr": trial_id}),
        trial_seed=100 + trial_id,
        length=length,
    )


def state_changed(state: int, experiment_id: int = 1) -> ev.ExperimentStateChanged:
    return ev.ExperimentStateChanged(experiment_id=experiment_id, state=state)


PAUSED = state_changed(ES.EXPERIMENT_STATE_PAUSED)
ACTIVATED = state_changed(ES.EXPERIMENT_STATE_ACTIVE)
KILL = ev.ExperimentKillRequested(experiment_id=1)


def trial_id_of(allocation_id: str) -> int:
    return int(allocation_id.split(".")[0])


def exited(allocation_id: str, code: int = 0, **extra: Any) -> ev.AllocationExited:
    trial_id = trial_id_of(allocation_id)
    return ev.AllocationExited(
        allocation_id=allocation_id,
        trial_id=trial_id,
        experiment_id=extra.pop("experiment_id", 1),
        agent_id="a",
        exit_code=code,
        task_id=str(trial_id),
        **extra,
    )


def agent_lost(allocation_id: str) -> ev.AllocationExited:
    return exited(allocation_id, -1, error="agent restarted", agent_lost=True)


def ack(allocation_id: str) -> ev.AllocationStopAcknowledged:
    return ev.AllocationStopAcknowledged(allocation_id=allocation_id, task_id=str(trial_id_of(allocation_id)))


def canceled(allocation_id: str) -> ev.AllocationCanceled:
    return ev.AllocationCanceled(
        allocation_id=allocation_id,
        task_id=str(trial_id_of(allocation_id)),
        reason="stopped before it was assigned",
    )


def searcher_stop(trial_id: int, reason: str = "cut at rung 1 (234 batches)") -> ev.TrialStopRequested:
    return ev.TrialStopRequested(trial_id=trial_id, experiment_id=1, reason=reason, rung=1)


def trial_kill(trial_id: int) -> ev.TrialKillRequested:
    return ev.TrialKillRequested(trial_id=trial_id, experiment_id=1)


def checkpoint(uuid: str, trial_id: int, steps: int) -> ev.CheckpointReported:
    return ev.CheckpointReported(
        uuid=uuid, trial_id=trial_id, experiment_id=1, allocation_id=f"{trial_id}.1", steps_completed=steps
    )


def assigned(allocation_id: str) -> ev.AllocationAssigned:
    placement = ev.Placement(agent_id="a", slot_ids=[0])
    return ev.AllocationAssigned(
        allocation_id=allocation_id, task_id=str(trial_id_of(allocation_id)), placements=[placement]
    )


def started(allocation_id: str) -> ev.AllocationStarted:
    return ev.AllocationStarted(
        allocation_id=allocation_id, trial_id=trial_id_of(allocation_id), agent_id="a"
    )


def running(*events: Message, **config: Any) -> LifecycleState:
    """Experiment 1 (active) with trial 1, whose run 1.1 was requested,
    assigned and started; then `events`."""
    state, appends = settle(given(experiment(**config), trial(1)))
    assert msg_ids(appends) == ["allocation-requested-1.1"]
    return given(assigned("1.1"), started("1.1"), *events, state=state)


def ended(appends: list[Append]) -> list[tuple[int, int, str]]:
    return [
        (a.payload.trial_id, a.payload.state, a.payload.reason)
        for a in appends
        if isinstance(a.payload, ev.TrialEnded)
    ]


# -- the first run ------------------------------------------------------------------


def test_the_first_run_is_requested_when_a_trial_of_an_active_experiment_is_created() -> None:
    created = experiment()
    [append] = core.decide(given(created, trial(5, length=250)))
    request = append.payload
    assert isinstance(request, ev.AllocationRequested)
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        "allocation/5.1",
        "allocation-requested-5.1",
        0,
    )
    assert (request.allocation_id, request.task_id, request.task_type) == ("5.1", "5", "TRIAL")
    assert (request.slots, request.resource_pool, request.job_id) == (1, "", "experiment/1")
    assert (request.weight, request.priority, request.max_slots) == (1.0, 0, 0)
    assert request.preemptible and request.owner == "alice"
    assert request.WhichOneof("spec") == "trial"
    launch = request.trial
    assert (launch.experiment_id, launch.trial_id, launch.trial_run_id) == (1, 5, 1)
    assert launch.config_json == created.config_json
    assert (launch.hparams_json, launch.trial_seed, launch.context_hash) == ('{"lr": 5}', 105, "ctx-1")
    assert (launch.latest_checkpoint, launch.steps_completed) == ("", 0)
    assert (launch.owner, launch.searcher_length) == ("alice", 250)
    assert request.reason == "trial 5's first run"


def test_the_request_carries_the_configs_resources() -> None:
    resources = {"slots_per_trial": 2, "weight": 2.5, "priority": 3, "max_slots": 4, "resource_pool": "gpus"}
    [append] = core.decide(given(experiment(7, resources=resources), trial(1, experiment_id=7)))
    request = append.payload
    assert (request.slots, request.weight, request.priority, request.max_slots) == (2, 2.5, 3, 4)
    assert (request.resource_pool, request.job_id) == ("gpus", "experiment/7")


def test_a_requested_run_is_not_requested_again() -> None:
    state, appends = settle(given(experiment(), trial(1), trial(2)))
    assert msg_ids(appends) == ["allocation-requested-1.1", "allocation-requested-2.1"]
    assert state.trials[1].run is not None and state.trials[1].run.allocation_id == "1.1"
    assert state.allocation_trials == {"1.1": 1, "2.1": 2}
    # Being assigned and started changes nothing for the lifecycle.
    assert core.decide(given(assigned("1.1"), started("1.1"), state=state)) == []


def test_nothing_is_requested_while_paused_and_the_run_is_requested_on_activation() -> None:
    state, appends = settle(given(experiment(activate=False), trial(1)))
    assert appends == [] and state.trials[1].run is None
    state, appends = settle(given(PAUSED, state=state))  # paused again: still nothing
    assert appends == []
    state, appends = settle(given(ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.1"]
    assert core.decide(given(ACTIVATED, state=state)) == []


def test_a_trial_created_while_paused_waits_for_the_activation() -> None:
    state, _ = settle(given(experiment(), PAUSED, trial(1)))
    assert core.decide(state) == []
    _, appends = settle(given(ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.1"]


def test_a_trial_of_an_unknown_experiment_is_ignored() -> None:
    state = given(trial(1, experiment_id=9))
    assert state.trials == {} and core.decide(state) == []


# -- exits --------------------------------------------------------------------------


def test_exit_0_completes_the_trial_and_the_trial_leaves_the_state() -> None:
    state, appends = settle(running(exited("1.1", 0)))
    [append] = appends
    end = append.payload
    assert isinstance(end, ev.TrialEnded)
    assert (append.aggregate, append.msg_id) == ("trial/1", "trial-ended-1")
    assert (end.trial_id, end.experiment_id, end.state, end.reason) == (1, 1, TS.TRIAL_STATE_COMPLETED, "")
    assert state.trials == {} and state.allocation_trials == {}
    assert 1 in state.experiments


def test_a_trial_ends_only_once_and_its_late_events_are_ignored() -> None:
    state, _ = settle(running(exited("1.1", 0)))
    state = given(exited("1.1", 0), checkpoint("late", 1, 5), trial_kill(1), searcher_stop(1), state=state)
    assert state.trials == {} and core.decide(state) == []


def test_failures_are_restarted_until_max_restarts_then_error() -> None:
    state, appends = settle(running(exited("1.1", 3, error="boom"), max_restarts=1))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    assert appends[0].payload.trial.trial_run_id == 2
    assert appends[0].payload.reason == "trial 1 run 2: restart 1 of 1: run 1 failed with exit code 3: boom"
    assert (state.trials[1].restarts, state.trials[1].run_id) == (1, 2)
    assert state.allocation_trials == {"1.2": 1}
    state, appends = settle(given(exited("1.2", 3), state=state))
    assert ended(appends) == [
        (1, TS.TRIAL_STATE_ERROR, "allocation 1.2 exited with code 3 (restarted 1 of 1 times)")
    ]
    assert state.trials == {}


def test_max_restarts_defaults_to_five_and_a_setup_error_counts_as_a_failure() -> None:
    state = running()
    for run in range(1, 6):
        state, appends = settle(
            given(exited(f"1.{run}", 1 if run % 2 else 0, error="" if run % 2 else "bad"), state=state)
        )
        assert msg_ids(appends) == [f"allocation-requested-1.{run + 1}"]
    state, appends = settle(given(exited("1.6", 0, error="no such context"), state=state))
    assert ended(appends) == [
        (
            1,
            TS.TRIAL_STATE_ERROR,
            "allocation 1.6 exited with code 0: no such context (restarted 5 of 5 times)",
        )
    ]


def test_max_restarts_zero_errors_on_the_first_failure() -> None:
    _, appends = settle(running(exited("1.1", 137), max_restarts=0))
    assert ended(appends) == [
        (1, TS.TRIAL_STATE_ERROR, "allocation 1.1 exited with code 137 (restarted 0 of 0 times)")
    ]


def test_a_failure_the_trial_says_a_restart_cannot_fix_errors_at_once() -> None:
    why = "the cluster cannot store the trial's reports: ReportError: too large"
    state, appends = settle(running(exited("1.1", 1, error=why, fatal=True), max_restarts=5))
    assert ended(appends) == [
        (
            1,
            TS.TRIAL_STATE_ERROR,
            f"allocation 1.1 exited with code 1: {why} (not restarted: a restart would fail the same way)",
        )
    ]
    assert state.trials == {}


def test_an_unasked_kill_is_a_failure() -> None:
    """killed=True without a stop or kill request (not the lifecycle's doing)."""
    state, appends = settle(running(exited("1.1", -9, killed=True), max_restarts=1))
    assert msg_ids(appends) == ["allocation-requested-1.2"] and state.trials[1].restarts == 1


def test_a_lost_agent_runs_the_trial_again_without_counting_a_restart() -> None:
    state, appends = settle(running(agent_lost("1.1"), max_restarts=0))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    assert appends[0].payload.reason == "trial 1 run 2: resumes after run 1 lost its agent (agent restarted)"
    assert state.trials[1].restarts == 0
    state, appends = settle(given(agent_lost("1.2"), state=state))
    assert msg_ids(appends) == ["allocation-requested-1.3"]
    _, appends = settle(given(exited("1.3", 1), state=state))
    assert ended(appends) == [
        (1, TS.TRIAL_STATE_ERROR, "allocation 1.3 exited with code 1 (restarted 0 of 0 times)")
    ]


def test_a_resumed_run_carries_the_newest_checkpoint_and_the_searchers_length() -> None:
    state = running(
        checkpoint("old", 1, 10),
        checkpoint("new", 1, 20),
        checkpoint("late-but-older", 1, 15),
        checkpoint("other-trials", 2, 50),
        ev.TrialLengthSet(trial_id=1, experiment_id=1, rung=1, length=400),
        exited("1.1", 1),
    )
    _, appends = settle(state)
    [append] = appends
    launch = append.payload.trial
    assert (launch.trial_run_id, launch.latest_checkpoint, launch.steps_completed) == (2, "new", 20)
    assert launch.searcher_length == 400
    assert append.payload.reason == (
        "trial 1 run 2: restart 1 of 5: run 1 failed with exit code 1, from checkpoint new at 20 batches"
    )


def test_a_checkpoint_with_as_many_steps_replaces_the_older_one() -> None:
    state = running(checkpoint("first", 1, 20), checkpoint("second", 1, 20), agent_lost("1.1"))
    _, [append] = settle(state)
    assert append.payload.trial.latest_checkpoint == "second"


def test_the_first_run_starts_from_the_searchers_source_checkpoint() -> None:
    created = experiment(searcher={"source_checkpoint_uuid": "warm-start"})
    state, [append] = settle(given(created, trial(1)))
    assert (append.payload.trial.latest_checkpoint, append.payload.trial.steps_completed) == ("warm-start", 0)
    state, [append] = settle(given(agent_lost("1.1"), state=state))
    assert append.payload.trial.latest_checkpoint == "warm-start"  # no checkpoint of its own yet
    state, [append] = settle(given(checkpoint("own", 1, 30), agent_lost("1.2"), state=state))
    assert (append.payload.trial.latest_checkpoint, append.payload.trial.steps_completed) == ("own", 30)


# -- searcher stop ------------------------------------------------------------------


def test_a_searcher_stop_asks_the_run_to_stop_once_then_ends_completed_with_its_reason() -> None:
    state, appends = settle(running(searcher_stop(1)))
    [append] = appends
    stop = append.payload
    assert isinstance(stop, ev.AllocationStopRequested)
    assert (append.aggregate, append.msg_id) == ("allocation/1.1", "allocation-stop-1.1")
    assert (stop.allocation_id, stop.task_id, stop.reason) == ("1.1", "1", "cut at rung 1 (234 batches)")
    assert state.trials[1].run is not None and state.trials[1].run.stop_requested
    state, appends = settle(given(searcher_stop(1), ack("1.1"), ack("1.1"), state=state))
    assert appends == []
    state, appends = settle(given(checkpoint("c", 1, 234), exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]
    assert kinds(appends) == ["trial_ended"] and state.trials == {}


def test_a_stopped_run_that_exits_0_without_acknowledging_completes() -> None:
    state, _ = settle(running(searcher_stop(1, "reached the top rung")))
    _, appends = settle(given(exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "reached the top rung")]


def test_a_stopped_run_killed_after_its_grace_period_completes() -> None:
    state, _ = settle(running(searcher_stop(1), max_restarts=0))
    _, appends = settle(given(exited("1.1", -9, killed=True), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


def test_a_searcher_stop_without_a_reason_reads_stopped_by_the_searcher() -> None:
    state, [append] = settle(running(searcher_stop(1, "")))
    assert append.payload.reason == "stopped by the searcher"
    _, appends = settle(given(exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "stopped by the searcher")]


def test_a_trial_the_searcher_stops_before_it_runs_completes_without_running() -> None:
    state, appends = settle(given(experiment(), trial(1), searcher_stop(1)))
    assert kinds(appends) == ["trial_ended"]
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]
    state, appends = settle(given(experiment(2, activate=False), trial(2, 2), state=state))
    assert appends == []
    _, appends = settle(given(ev.TrialStopRequested(trial_id=2, experiment_id=2, reason="done"), state=state))
    assert ended(appends) == [(2, TS.TRIAL_STATE_COMPLETED, "done")]


def test_a_failure_after_a_searcher_stop_completes_within_the_restarts() -> None:
    state, _ = settle(running(searcher_stop(1), max_restarts=1))
    _, appends = settle(given(exited("1.1", 2), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


def test_a_lost_agent_after_a_searcher_stop_completes() -> None:
    state, _ = settle(running(searcher_stop(1)))
    _, appends = settle(given(agent_lost("1.1"), state=state))
    assert kinds(appends) == ["trial_ended"]
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


# -- pause ----------------------------------------------------------------------------


def test_pause_asks_the_run_to_stop_and_the_trial_waits_then_resumes_from_its_checkpoint() -> None:
    state, appends = settle(running(PAUSED))
    [append] = appends
    assert (append.msg_id, append.payload.reason) == ("allocation-stop-1.1", "experiment paused")
    state, appends = settle(given(PAUSED, checkpoint("ck", 1, 60), ack("1.1"), state=state))
    assert appends == []
    state, appends = settle(given(exited("1.1", 0), state=state))
    assert appends == []
    assert state.trials[1].run is None and state.trials[1].restarts == 0
    assert state.allocation_trials == {}
    state, appends = settle(given(ACTIVATED, state=state))
    [append] = appends
    assert append.msg_id == "allocation-requested-1.2"
    assert append.payload.reason == "trial 1 run 2: activated after a pause, from checkpoint ck at 60 batches"
    launch = append.payload.trial
    assert (launch.trial_run_id, launch.latest_checkpoint, launch.steps_completed) == (2, "ck", 60)
    assert state.trials[1].restarts == 0


def test_a_paused_run_killed_after_its_grace_period_waits_as_well() -> None:
    state, _ = settle(running(PAUSED, max_restarts=0))
    state, appends = settle(given(exited("1.1", -9, killed=True), state=state))
    assert appends == [] and state.trials[1].restarts == 0
    _, appends = settle(given(ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]


def test_a_paused_run_that_exits_0_without_acknowledging_completes() -> None:
    state, _ = settle(running(PAUSED))
    _, appends = settle(given(exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "")]


def test_a_failure_while_paused_counts_as_a_restart_and_waits() -> None:
    state, _ = settle(running(PAUSED, max_restarts=1))
    state, appends = settle(given(exited("1.1", 1), state=state))
    assert appends == [] and state.trials[1].restarts == 1
    state, appends = settle(given(ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    _, appends = settle(given(exited("1.2", 1), state=state))
    assert ended(appends)[0][1] == TS.TRIAL_STATE_ERROR


def test_a_lost_agent_while_paused_waits() -> None:
    state, _ = settle(running(PAUSED))
    state, appends = settle(given(agent_lost("1.1"), state=state))
    assert appends == [] and state.trials[1].restarts == 0


def test_activating_before_the_stopped_run_exits_runs_it_again_at_once() -> None:
    state, _ = settle(running(PAUSED))
    state, appends = settle(given(ACTIVATED, ack("1.1"), state=state))
    assert appends == []  # no second stop, no second run while one is open
    _, appends = settle(given(exited("1.1", 0), state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]


def test_a_pause_then_a_searcher_stop_ask_once_and_the_searchers_reason_ends_it() -> None:
    state, [append] = settle(running(PAUSED))
    assert append.payload.reason == "experiment paused"
    state, appends = settle(given(searcher_stop(1), state=state))
    assert appends == []
    _, appends = settle(given(ack("1.1"), exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


def test_a_searcher_stop_of_a_waiting_trial_completes_it() -> None:
    state, _ = settle(running(PAUSED, ack("1.1"), exited("1.1", 0)))
    _, appends = settle(given(searcher_stop(1), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


# -- kill -------------------------------------------------------------------------------


def test_an_experiment_kill_kills_running_trials_and_cancels_idle_ones() -> None:
    state, _ = settle(running(PAUSED, trial(2)))  # 1.1 asked to stop (still running); 2 idle
    assert state.trials[2].run is None
    state, appends = settle(given(KILL, state=state))
    assert kinds(appends) == ["allocation_kill_requested", "trial_ended"]
    kill = appends[0]
    assert (kill.aggregate, kill.msg_id) == ("allocation/1.1", "allocation-kill-1.1")
    assert (kill.payload.allocation_id, kill.payload.trial_id, kill.payload.task_id) == ("1.1", 1, "1")
    assert kill.payload.reason == "experiment killed"
    assert ended(appends) == [(2, TS.TRIAL_STATE_CANCELED, "experiment killed")]
    assert list(state.trials) == [1]
    state, appends = settle(given(KILL, state=state))  # asked twice
    assert appends == []
    state, appends = settle(given(exited("1.1", -15, killed=True), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "experiment killed")]
    assert state.trials == {}


def test_a_failure_of_a_killed_trial_is_not_retried() -> None:
    state, _ = settle(running(KILL))
    state, appends = settle(given(exited("1.1", 1), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "experiment killed")]
    assert kinds(appends) == ["trial_ended"]


def test_a_lost_agent_of_a_killed_trial_cancels_it() -> None:
    state, _ = settle(running(KILL))
    _, appends = settle(given(agent_lost("1.1"), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "experiment killed")]


def test_a_kill_that_loses_the_race_with_exit_0_leaves_the_trial_completed() -> None:
    state, _ = settle(running(KILL))
    _, appends = settle(given(exited("1.1", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "")]


def test_a_trial_created_after_the_kill_is_canceled_at_once() -> None:
    state, _ = settle(given(experiment(), KILL))
    _, appends = settle(given(trial(4), state=state))
    assert kinds(appends) == ["trial_ended"]
    assert ended(appends) == [(4, TS.TRIAL_STATE_CANCELED, "experiment killed")]


def test_a_kill_after_a_stop_request_still_kills_once() -> None:
    state, _ = settle(running(searcher_stop(1)))
    state, appends = settle(given(KILL, state=state))
    assert msg_ids(appends) == ["allocation-kill-1.1"]
    state, appends = settle(given(ack("1.1"), KILL, state=state))
    assert appends == []
    _, appends = settle(given(exited("1.1", -15, killed=True), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "experiment killed")]


def test_a_trial_kill_kills_only_that_trial() -> None:
    state, _ = settle(running(trial(2)))
    state, appends = settle(given(trial_kill(1), state=state))
    [append] = appends
    assert (append.msg_id, append.payload.reason) == ("allocation-kill-1.1", "killed by a user")
    state, appends = settle(given(trial_kill(1), state=state))
    assert appends == []
    state, appends = settle(given(exited("1.1", -15, killed=True), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "killed by a user")]
    assert list(state.trials) == [2] and state.trials[2].run is not None


def test_a_trial_kill_of_a_waiting_trial_cancels_it_at_once() -> None:
    state, _ = settle(running(PAUSED, ack("1.1"), exited("1.1", 0)))
    _, appends = settle(given(trial_kill(1), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "killed by a user")]


def test_a_kill_of_a_pending_request_ends_canceled_once_the_scheduler_cancels_it() -> None:
    state, _ = settle(given(experiment(), trial(1)))  # requested, never assigned
    state, appends = settle(given(trial_kill(1), state=state))
    assert msg_ids(appends) == ["allocation-kill-1.1"]
    _, appends = settle(given(canceled("1.1"), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "killed by a user")]


# -- canceled requests ------------------------------------------------------------------


def test_a_canceled_request_is_requested_again_while_active() -> None:
    state, _ = settle(given(experiment(max_restarts=0), trial(1)))
    state, appends = settle(given(canceled("1.1"), state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    assert appends[0].payload.reason == (
        "trial 1 run 2: resumes after run 1 was canceled before it got slots (stopped before it was assigned)"
    )
    assert state.trials[1].restarts == 0 and state.allocation_trials == {"1.2": 1}


def test_a_request_canceled_by_a_pause_waits_for_the_activation() -> None:
    state, _ = settle(given(experiment(), trial(1)))
    state, [stop] = settle(given(PAUSED, state=state))
    assert stop.msg_id == "allocation-stop-1.1"
    state, appends = settle(given(canceled("1.1"), canceled("1.1"), state=state))
    assert appends == []
    _, appends = settle(given(ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    assert appends[0].payload.reason == "trial 1 run 2: activated after a pause"


def test_a_request_canceled_after_a_searcher_stop_completes_the_trial() -> None:
    state, _ = settle(given(experiment(), trial(1)))
    state, _ = settle(given(searcher_stop(1, "not promising"), state=state))
    _, appends = settle(given(canceled("1.1"), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "not promising")]


# -- what the state keeps -----------------------------------------------------------------


def test_terminal_experiments_leave_the_state_with_their_trials() -> None:
    state, _ = settle(given(experiment(1), trial(1), experiment(2), trial(2, 2), trial(3, 2)))
    assert set(state.experiments) == {1, 2} and set(state.trials) == {1, 2, 3}
    for terminal in (ES.EXPERIMENT_STATE_COMPLETED, ES.EXPERIMENT_STATE_CANCELED, ES.EXPERIMENT_STATE_ERROR):
        gone = given(state_changed(terminal, 2), state=state)
        assert set(gone.experiments) == {1} and set(gone.trials) == {1}
        assert gone.allocation_trials == {"1.1": 1}
        # What arrives for them later is ignored.
        gone = given(exited("2.1", 1, experiment_id=2), trial(4, 2), state=gone)
        assert set(gone.trials) == {1} and core.decide(gone) == []


def test_stopping_states_change_nothing() -> None:
    state, _ = settle(running())
    for stopping in (ES.EXPERIMENT_STATE_STOPPING_COMPLETED, ES.EXPERIMENT_STATE_STOPPING_KILLED):
        assert given(state_changed(stopping), state=state) == state


def test_events_of_unknown_experiments_trials_and_allocations_are_ignored() -> None:
    state, _ = settle(running())
    before = state
    state = given(
        trial_kill(99),
        searcher_stop(99),
        ev.TrialLengthSet(trial_id=99, experiment_id=1, length=5),
        ev.TrialEnded(trial_id=99, experiment_id=1, state=TS.TRIAL_STATE_COMPLETED),
        checkpoint("x", 99, 5),
        exited("99.1", 1),
        agent_lost("99.1"),
        ack("99.1"),
        canceled("99.1"),
        ev.AllocationStopRequested(allocation_id="99.1", task_id="99"),
        ev.AllocationKillRequested(allocation_id="99.1", trial_id=99, task_id="99"),
        ev.ExperimentKillRequested(experiment_id=9),
        state_changed(ES.EXPERIMENT_STATE_PAUSED, 9),
        state_changed(ES.EXPERIMENT_STATE_COMPLETED, 9),
        state=state,
    )
    assert state == before and core.decide(state) == []


def test_events_about_an_earlier_run_are_ignored() -> None:
    state, _ = settle(running(exited("1.1", 1)))  # 1.2 requested
    before = state
    state = given(
        exited("1.1", 1),
        agent_lost("1.1"),
        ack("1.1"),
        canceled("1.1"),
        ev.AllocationStopRequested(allocation_id="1.1", task_id="1"),
        ev.AllocationKillRequested(allocation_id="1.1", trial_id=1, task_id="1"),
        state=state,
    )
    assert state == before and core.decide(state) == []


def test_payloads_this_code_does_not_know_and_other_events_are_skipped() -> None:
    state, _ = settle(running())
    unknown = Envelope(event_id="future", aggregate="experiment/1")
    assert core.evolve(state, unknown) == state
    others = given(
        ev.AgentRegistered(agent_id="a"),
        ev.TrialProgressReported(trial_id=1, experiment_id=1, progress=0.5),
        ev.TrialStatusReported(trial_id=1, experiment_id=1, status="training"),
        ev.ExperimentProgressChanged(experiment_id=1, progress=0.5),
        state=state,
    )
    assert others == state


def test_requests_of_other_tasks_are_ignored() -> None:
    state, _ = settle(running())
    command = ev.AllocationRequested(allocation_id="cmd-1.1", task_id="cmd-1", task_type="COMMAND", slots=1)
    command_exited = ev.AllocationExited(allocation_id="cmd-1.1", task_id="cmd-1", exit_code=1)
    assert given(command, command_exited, state=state) == state


def test_duplicates_of_the_same_event_are_harmless() -> None:
    # A user's repeated commands, a re-sent report: stored twice, decided once.
    state, appends = settle(
        running(
            checkpoint("c", 1, 10),
            checkpoint("c", 1, 10),
            ev.TrialLengthSet(trial_id=1, experiment_id=1, rung=1, length=400),
            ev.TrialLengthSet(trial_id=1, experiment_id=1, rung=1, length=400),
            PAUSED,
            PAUSED,
        )
    )
    assert msg_ids(appends) == ["allocation-stop-1.1"]
    state, appends = settle(given(ack("1.1"), ack("1.1"), exited("1.1", 0), exited("1.1", 0), state=state))
    assert appends == []
    state, appends = settle(given(ACTIVATED, ACTIVATED, state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    assert (appends[0].payload.trial.latest_checkpoint, appends[0].payload.trial.searcher_length) == (
        "c",
        400,
    )
    state, appends = settle(given(exited("1.2", 2), exited("1.2", 2), state=state))
    assert msg_ids(appends) == ["allocation-requested-1.3"] and state.trials[1].restarts == 1
    state, appends = settle(given(trial_kill(1), trial_kill(1), state=state))
    assert msg_ids(appends) == ["allocation-kill-1.3"]
    state, appends = settle(
        given(exited("1.3", -15, killed=True), exited("1.3", -15, killed=True), state=state)
    )
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "killed by a user")]
    end = appends[0].payload
    state = given(end, end, state=state)
    assert state.trials == {} and core.decide(state) == []


def test_a_trial_ended_by_an_old_scheduler_leaves_the_state_with_its_run() -> None:
    state, _ = settle(running())
    state = given(ev.TrialEnded(trial_id=1, experiment_id=1, state=TS.TRIAL_STATE_CANCELED), state=state)
    assert state.trials == {} and state.allocation_trials == {}
    assert given(exited("1.1", 1), state=state) == state


def test_an_old_shape_assignment_reads_as_the_trials_request() -> None:
    created = experiment(max_restarts=1)
    old = ev.AllocationAssigned(
        allocation_id="1.1",
        trial_id=1,
        experiment_id=1,
        agent_id="a",
        slot_ids=[0],
        trial_run_id=1,
        config_json=created.config_json,
        hparams_json='{"lr": 1}',
        context_hash="ctx-1",
        trial_seed=101,
        owner="alice",
    )
    state = given(created, trial(1), old)
    assert state.trials[1].run_id == 1 and state.allocation_trials == {"1.1": 1}
    assert core.decide(state) == []
    state, appends = settle(given(exited("1.1", 3), state=state))
    assert msg_ids(appends) == ["allocation-requested-1.2"]
    _, appends = settle(given(exited("1.2", 0), state=state))
    assert ended(appends) == [(1, TS.TRIAL_STATE_COMPLETED, "")]


def test_replaying_a_whole_history_decides_nothing_again() -> None:
    history: list[Message] = [experiment(max_restarts=1), trial(1), trial(2), trial(3)]
    state, appends = settle(given(*history))
    history += [a.payload for a in appends]
    steps: list[Message] = [
        exited("1.1", 2),
        checkpoint("c2", 2, 7),
        PAUSED,
        ack("2.1"),
        exited("2.1", 0),
        exited("3.1", -9, killed=True),
        ACTIVATED,
        searcher_stop(2),
        exited("2.2", 0),
        agent_lost("1.2"),
        KILL,
        exited("1.3", -15, killed=True),
        exited("3.2", 1),
    ]
    for event in steps:
        state, appends = settle(given(event, state=state))
        history += [event, *[a.payload for a in appends]]
    assert state.trials == {}
    replayed = given(*history)
    assert core.decide(replayed) == [] and replayed.trials == {}
    ends = [(e.trial_id, e.state) for e in history if isinstance(e, ev.TrialEnded)]
    assert ends == [(2, TS.TRIAL_STATE_COMPLETED), (1, TS.TRIAL_STATE_CANCELED), (3, TS.TRIAL_STATE_CANCELED)]


# -- beside the scheduler and an agent ------------------------------------------------------


class Conflict(Exception):
    pass


@dataclass
class Cluster:
    """The lifecycle, the scheduler and agent "a" on one log: an append with
    an expected version is refused when the aggregate moved on, one with a
    stored msg id is stored once; every core folds the kinds it reads."""

    cores: dict[str, Core[Any]] = field(
        default_factory=lambda: {
            "lifecycle": TrialLifecycleCore(),
            "scheduler": SchedulerCore(),
            "agent": AgentCore("a"),
        }
    )
    states: dict[str, Any] = field(default_factory=dict)
    log: list[Envelope] = field(default_factory=list)
    versions: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.states = {name: c.initial_state() for name, c in self.cores.items()}

    def append(self, append: Append, actor: str = "user") -> bool:
        if any(e.event_id == append.msg_id for e in self.log):
            return False
        if append.expected_version is not None and self.versions[append.aggregate] != append.expected_version:
            raise Conflict(append.msg_id)
        stored = wrap(append, actor=actor, occurred_at_ns=len(self.log))
        self.log.append(stored)
        self.versions[append.aggregate] += 1
        for name, c in self.cores.items():
            if subject_kind(append.payload) in c.kinds:
                self.states[name] = c.evolve(self.states[name], stored)
        return True

    def post(self, *payloads: Message) -> "Cluster":
        for payload in payloads:
            self.append(Append(aggregate_of(payload), payload, f"user-{next(_event_ids)}"))
        return self

    def settle(self, *only: str) -> list[Append]:
        """Decides and appends until no core (of `only`, when given) decides."""
        cores = {name: c for name, c in self.cores.items() if not only or name in only}
        decided: list[Append] = []
        for _ in range(100):
            appends = [(name, a) for name, c in cores.items() for a in c.decide(self.states[name])]
            if not appends:
                return decided
            for name, append in appends:
                if self.append(append, actor=f"service:{name}"):
                    decided.append(append)
        raise AssertionError("the cores did not settle")

    @property
    def lifecycle(self) -> LifecycleState:
        state: LifecycleState = self.states["lifecycle"]
        return state


def test_a_trial_runs_on_the_agent_and_completes() -> None:
    cluster = Cluster().post(
        ev.AgentRegistered(agent_id="a", slots=[ev.Slot(slot_id=0)]), experiment(), trial(1)
    )
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.1", "allocation-assigned-1.1"]
    allocation = cluster.states["agent"].allocations["1.1"]
    assert allocation.launch.trial_id == 1 and allocation.slot_ids == (0,)
    cluster.post(started("1.1"), exited("1.1", 0))
    assert ended(cluster.settle()) == [(1, TS.TRIAL_STATE_COMPLETED, "")]
    assert cluster.states["scheduler"].requests == {} and cluster.states["agent"].allocations == {}


def test_a_pause_of_a_pending_request_cancels_it_and_activation_runs_it() -> None:
    cluster = Cluster().post(
        experiment(), trial(1), trial(2), ev.AgentRegistered(agent_id="a", slots=[ev.Slot()])
    )
    cluster.settle()  # 1.1 assigned, 2.1 pending
    cluster.post(PAUSED)
    assert msg_ids(cluster.settle()) == [
        "allocation-stop-1.1",
        "allocation-stop-2.1",
        "allocation-canceled-2.1",
    ]
    assert cluster.states["agent"].pending == {}
    cluster.post(ack("1.1"), exited("1.1", 0))
    assert cluster.settle() == []
    cluster.post(ACTIVATED)
    assert msg_ids(cluster.settle()) == [
        "allocation-requested-1.2",
        "allocation-requested-2.2",
        "allocation-assigned-1.2",
    ]


def test_a_kill_of_a_pending_request_cancels_the_trial() -> None:
    cluster = Cluster().post(experiment(), trial(1))
    cluster.settle()  # no agent: pending
    cluster.post(KILL)
    appends = cluster.settle()
    assert msg_ids(appends) == ["allocation-kill-1.1", "allocation-canceled-1.1", "trial-ended-1"]
    assert ended(appends) == [(1, TS.TRIAL_STATE_CANCELED, "experiment killed")]
    assert cluster.states["scheduler"].requests == {} and cluster.lifecycle.trials == {}


def test_an_agent_restart_runs_the_trial_again_without_a_restart() -> None:
    cluster = Cluster().post(
        ev.AgentRegistered(agent_id="a", slots=[ev.Slot()]), experiment(max_restarts=0), trial(1)
    )
    cluster.settle()
    cluster.post(started("1.1"), ev.AgentRegistered(agent_id="a", slots=[ev.Slot()]))
    appends = cluster.settle()
    assert msg_ids(appends) == [
        "allocation-exited-1.1",
        "allocation-requested-1.2",
        "allocation-assigned-1.2",
    ]
    assert appends[0].payload.agent_lost and cluster.lifecycle.trials[1].restarts == 0
    assert list(cluster.states["agent"].allocations) == ["1.2"]


def test_an_assignment_racing_with_a_stop_request_reaches_the_agent_with_the_stop() -> None:
    cluster = Cluster().post(experiment(), trial(1))
    cluster.settle()
    cluster.post(ev.AgentRegistered(agent_id="a", slots=[ev.Slot()]))
    stale = cluster.cores["scheduler"].decide(cluster.states["scheduler"])
    assert msg_ids(stale) == ["allocation-assigned-1.1"]
    # The lifecycle's stop reaches the log first; the scheduler's assignment lands after it.
    cluster.post(searcher_stop(1))
    assert msg_ids(cluster.settle("lifecycle")) == ["allocation-stop-1.1"]
    cluster.append(stale[0], actor="service:scheduler")
    assert msg_ids(cluster.settle()) == []
    assert cluster.states["agent"].allocations["1.1"].stop_requested


# -- random histories ---------------------------------------------------------------------


def check_invariants(cluster: Cluster) -> None:
    """What must hold after every settle, whatever happened before."""
    scheduler, agent, lifecycle = (cluster.states[name] for name in ("scheduler", "agent", "lifecycle"))
    requested: dict[str, int] = {}
    closed: set[str] = set()
    for stored in cluster.log:
        payload = getattr(stored, stored.WhichOneof("payload"))
        if isinstance(payload, ev.AllocationRequested):
            requested[payload.allocation_id] = payload.trial.trial_id
        elif isinstance(payload, ev.AllocationExited | ev.AllocationCanceled):
            closed.add(payload.allocation_id)
    open_runs = Counter(t for a, t in requested.items() if a not in closed)
    assert all(n == 1 for n in open_runs.values()), f"a trial with two open runs: {open_runs}"
    assert set(scheduler.requests) == {a for a in requested if a not in closed}
    used = Counter(
        (agent_id, slot)
        for r in scheduler.requests.values()
        for agent_id, slots in r.placements
        for slot in slots
    )
    assert all(n == 1 for n in used.values()), f"a slot given twice: {used}"
    assert all(slot in scheduler.agents[agent_id].slot_ids for agent_id, slot in used)
    assert not [r for r in scheduler.requests.values() if r.withdrawn and not r.assigned], (
        "a stop left pending"
    )
    assert set(agent.allocations) == {a for a, r in scheduler.requests.items() if r.assigned}
    for t in lifecycle.trials.values():
        experiment_ = lifecycle.experiments[t.created.experiment_id]
        if t.run is None:  # only a paused experiment's trial waits
            assert experiment_.paused and not experiment_.killed, t
            assert t.searcher_stop is None and not t.kill_requested, t
        else:
            assert t.run.allocation_id in scheduler.requests, t
            if experiment_.killed or t.kill_requested:
                assert t.run.kill_requested, t
            elif experiment_.paused or t.searcher_stop is not None:
                assert t.run.stops.requested or t.run.kill_requested, t
            else:  # active again: a pause's stop was withdrawn
                assert not t.run.stops.requested, t


def random_history(seed: int, steps: int = 60) -> Cluster:
    rnd = random.Random(seed)
    slots = [ev.Slot(slot_id=i) for i in range(2)]
    cluster = Cluster().post(
        ev.AgentRegistered(agent_id="a", slots=slots),
        experiment(max_restarts=rnd.choice([0, 1, 3]), resources={"slots_per_trial": rnd.choice([0, 1, 2])}),
    )
    trials = itertools.count(1)
    started_: set[str] = set()
    for step in range(steps):
        lifecycle, agent = cluster.lifecycle, cluster.states["agent"]
        choices: list[list[Message]] = [[trial(next(trials))], [PAUSED], [ACTIVATED]]
        if rnd.random() < 0.05:
            choices.append([KILL])
        if rnd.random() < 0.2:
            choices.append([ev.AgentRegistered(agent_id="a", slots=slots)])
        for t in lifecycle.trials:
            choices += [
                [trial_kill(t)],
                [searcher_stop(t)],
                [checkpoint(f"ck-{step}", t, step)],
                [ev.TrialLengthSet(trial_id=t, experiment_id=1, length=step)],
            ]
        for a, allocation in agent.allocations.items():
            if allocation.orphaned:
                continue
            if a not in started_:
                choices.append([started(a)])
                continue
            choices += [[exited(a, 0)], [exited(a, 1)], [ack(a), exited(a, 0)]]
            if allocation.stop_requested or allocation.kill_requested:
                choices.append([exited(a, -9, killed=True)])
        events = rnd.choice(choices)
        if isinstance(events[0], ev.AgentRegistered):
            started_.clear()
        started_ |= {e.allocation_id for e in events if isinstance(e, ev.AllocationStarted)}
        cluster.post(*events)
        cluster.settle()
        check_invariants(cluster)
    return cluster


@pytest.mark.parametrize(
    "seeds", [range(n, n + 25) for n in range(0, 200, 25)], ids=lambda r: f"{r.start}-{r.stop}"
)
def test_random_histories_keep_the_invariants_and_every_trial_ends(seeds: range) -> None:
    for seed in seeds:
        cluster = random_history(seed)
        # The searcher is done with every trial and every process exits: all end.
        cluster.post(ACTIVATED, *[searcher_stop(t) for t in cluster.lifecycle.trials])
        cluster.settle()
        for _ in range(10):
            cluster.post(*[exited(a, 0) for a in cluster.states["agent"].allocations])
            cluster.settle()
            check_invariants(cluster)
        assert cluster.lifecycle.trials == {}, seed
        assert cluster.states["scheduler"].requests == {}, seed
        ends = [e.trial_ended.trial_id for e in cluster.log if e.WhichOneof("payload") == "trial_ended"]
        assert len(ends) == len(set(ends)), seed
