"""determined.common.states: every pair of states checked against the
transitions written out here, plus the shape each map must keep."""

import itertools
import subprocess
import sys
from collections.abc import Mapping

import pytest

from determined.common import states
from determined.common.states import (
    AllocationState,
    CheckpointState,
    ExperimentState,
    TrialState,
)
from determined.proto import events_pb2

# Every allowed change, "FROM -> TO TO ...": all other pairs are refused.
EXPERIMENT_CHANGES = """
ACTIVE -> PAUSED STOPPING_COMPLETED STOPPING_CANCELED STOPPING_KILLED STOPPING_ERROR COMPLETED CANCELED ERROR
PAUSED -> ACTIVE STOPPING_CANCELED STOPPING_KILLED STOPPING_ERROR COMPLETED CANCELED ERROR
STOPPING_COMPLETED -> COMPLETED STOPPING_KILLED STOPPING_ERROR ERROR
STOPPING_CANCELED -> CANCELED STOPPING_KILLED STOPPING_ERROR ERROR
STOPPING_KILLED -> CANCELED STOPPING_ERROR ERROR
STOPPING_ERROR -> ERROR
COMPLETED -> DELETING
CANCELED -> DELETING
ERROR -> DELETING
DELETING -> DELETED DELETE_FAILED
DELETE_FAILED -> DELETING
DELETED ->
"""
TRIAL_CHANGES = """
ACTIVE -> RUNNING PAUSED STOPPING_COMPLETED STOPPING_CANCELED STOPPING_KILLED STOPPING_ERROR COMPLETED CANCELED ERROR
RUNNING -> ACTIVE PAUSED STOPPING_COMPLETED STOPPING_CANCELED STOPPING_KILLED STOPPING_ERROR COMPLETED CANCELED ERROR
PAUSED -> ACTIVE RUNNING STOPPING_CANCELED STOPPING_KILLED STOPPING_ERROR COMPLETED CANCELED ERROR
STOPPING_COMPLETED -> COMPLETED STOPPING_KILLED STOPPING_ERROR ERROR
STOPPING_CANCELED -> CANCELED STOPPING_KILLED STOPPING_ERROR ERROR
STOPPING_KILLED -> CANCELED STOPPING_ERROR ERROR
STOPPING_ERROR -> ERROR
COMPLETED ->
CANCELED ->
ERROR ->
"""
ALLOCATION_CHANGES = """
QUEUED -> RUNNING CANCELED
RUNNING -> COMPLETED STOPPED KILLED CANCELED AGENT_LOST FAILED
COMPLETED ->
STOPPED ->
KILLED ->
CANCELED ->
AGENT_LOST ->
FAILED ->
"""
CHECKPOINT_CHANGES = """
COMPLETED -> DELETING
DELETING -> DELETED PARTIALLY_DELETED
PARTIALLY_DELETED -> DELETING
DELETED ->
"""
KINDS = [
    (
        ExperimentState,
        EXPERIMENT_CHANGES,
        states.EXPERIMENT_TRANSITIONS,
        {ExperimentState.ACTIVE, ExperimentState.PAUSED},
    ),
    (TrialState, TRIAL_CHANGES, states.TRIAL_TRANSITIONS, {TrialState.ACTIVE}),
    (AllocationState, ALLOCATION_CHANGES, states.ALLOCATION_TRANSITIONS, {AllocationState.QUEUED}),
    (CheckpointState, CHECKPOINT_CHANGES, states.CHECKPOINT_TRANSITIONS, {CheckpointState.COMPLETED}),
]
IDS = [kind.__name__ for kind, *_ in KINDS]


def _changes(text: str) -> dict[str, set[str]]:
    table = {}
    for line in text.strip().splitlines():
        source, _, targets = line.partition("->")
        table[source.strip()] = set(targets.split())
    return table


def _reachable(
    transitions: Mapping[states.State, frozenset[states.State]], start: set[states.State]
) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for after in transitions[todo.pop()]:
            if after not in seen:
                seen.add(after)
                todo.append(after)
    return seen


@pytest.mark.parametrize(("kind", "text", "transitions", "initial"), KINDS, ids=IDS)
def test_every_pair_of_states_is_allowed_exactly_when_the_table_says(
    kind: type[states.State], text: str, transitions: Mapping, initial: set
) -> None:
    table = _changes(text)
    assert set(table) == {str(s) for s in kind}, "the table names each state once"
    assert set(transitions) == set(kind)
    for current, new in itertools.product(kind, kind):
        assert states.can_transition(current, new) == (new in table[current]), (current, new)
        assert states.can_transition(current, str(new)) == (new in table[current])


@pytest.mark.parametrize(("kind", "text", "transitions", "initial"), KINDS, ids=IDS)
def test_every_state_is_reachable_and_only_final_states_are_dead_ends(
    kind: type[states.State], text: str, transitions: Mapping, initial: set
) -> None:
    assert _reachable(transitions, initial) == set(kind)
    for state, after in transitions.items():
        assert state not in after, f"{state} changes to itself"
        assert all(isinstance(a, kind) for a in after)
    final = {s for s, after in transitions.items() if not after}
    for state in kind:
        assert _reachable(transitions, {state}) & final, f"{state} can never end"


def test_terminal_states_end_experiments_and_trials_and_only_deletion_follows() -> None:
    assert {"COMPLETED", "CANCELED", "ERROR"} == states.TERMINAL_STATES
    for state in states.TERMINAL_STATES:
        assert states.EXPERIMENT_TRANSITIONS[ExperimentState(state)] == {ExperimentState.DELETING}
        assert states.TRIAL_TRANSITIONS[TrialState(state)] == frozenset()
    live = {ExperimentState.ACTIVE, ExperimentState.PAUSED, *states.STOPPING_STATES}
    assert _reachable(states.EXPERIMENT_TRANSITIONS, set(states.TERMINAL_STATES)).isdisjoint(live)


@pytest.mark.parametrize("kind", [ExperimentState, TrialState], ids=str)
def test_a_stopping_state_ends_where_it_says_and_never_runs_again(
    kind: type[ExperimentState | TrialState],
) -> None:
    ends = {"STOPPING_COMPLETED": "COMPLETED", "STOPPING_CANCELED": "CANCELED", "STOPPING_KILLED": "CANCELED"}
    for stopping in states.STOPPING_STATES:
        assert states.can_transition(kind(stopping), ends.get(stopping, "ERROR"))
        assert states.can_transition(kind(stopping), "ERROR")
        assert not any(states.can_transition(kind(stopping), s) for s in ("ACTIVE", "PAUSED", "RUNNING"))


def test_the_derived_sets_follow_the_maps() -> None:
    assert {"COMPLETED", "CANCELED", "ERROR", "DELETE_FAILED"} == states.EXPERIMENT_DELETABLE_STATES
    assert {"COMPLETED", "PARTIALLY_DELETED"} == states.CHECKPOINT_DELETABLE_STATES
    assert {
        "COMPLETED",
        "CANCELED",
        "ERROR",
        "DELETING",
        "DELETE_FAILED",
        "DELETED",
    } == states.EXPERIMENT_ENDED_STATES
    assert {s for s, a in states.ALLOCATION_TRANSITIONS.items() if not a} == states.ALLOCATION_TERMINAL_STATES
    ended = states.EXPERIMENT_ENDED_STATES
    assert _reachable(states.EXPERIMENT_TRANSITIONS, set(ended)) == ended, (
        "an ended experiment never trains again"
    )


@pytest.mark.parametrize("state", list(ExperimentState) + list(TrialState), ids=str)
def test_the_predicates_agree_with_the_sets(state: str) -> None:
    assert states.is_terminal(state) == (state in {"COMPLETED", "CANCELED", "ERROR"})
    assert states.is_stopping(state) == state.startswith("STOPPING_")
    assert states.is_ended(state) == (state in states.EXPERIMENT_ENDED_STATES)


def test_states_equal_their_strings_so_sets_answer_for_api_strings() -> None:
    assert "COMPLETED" in states.TERMINAL_STATES and TrialState.CANCELED in states.TERMINAL_STATES
    assert ExperimentState.PAUSED == "PAUSED" == TrialState.PAUSED
    assert f"{CheckpointState.DELETED}" == "DELETED"


def test_every_event_state_reads_back_and_writes_the_same_value() -> None:
    for proto_enum, read, kind in (
        (events_pb2.ExperimentState, states.experiment_state, ExperimentState),
        (events_pb2.TrialState, states.trial_state, TrialState),
    ):
        for name, value in proto_enum.items():
            if value == 0:
                with pytest.raises(ValueError):
                    read(value)
                continue
            state = read(value)
            assert isinstance(state, kind) and name.endswith("_" + state)
            assert read(name) is state is read(str(state))
            assert states.proto_value(state) == value
    assert states.proto_values(ExperimentState, states.TERMINAL_STATES) == {
        events_pb2.EXPERIMENT_STATE_COMPLETED,
        events_pb2.EXPERIMENT_STATE_CANCELED,
        events_pb2.EXPERIMENT_STATE_ERROR,
    }
    with pytest.raises(ValueError):
        states.proto_value(ExperimentState.DELETING)
    with pytest.raises(ValueError):
        states.proto_value(TrialState.RUNNING)


def test_importing_the_states_loads_no_protobuf() -> None:
    code = "import sys, determined.common.states; print('google.protobuf' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
