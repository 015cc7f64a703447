"""The states of experiments, trials, runs (allocations), checkpoints and
tasks (notebooks, TensorBoards, commands, shells), and
the changes between them that may happen: the one place they are written out
(shaped like Determined's master/pkg/model/experiment.go).

Each state is a `StrEnum` member named as the API and the UI spell it
(ACTIVE, STOPPING_KILLED, COMPLETED, ...): it equals its plain string, so the
sets below answer for strings read from the API or a table as well. Events
carry experiment and trial states as proto enum values
(EXPERIMENT_STATE_COMPLETED); `experiment_state` and `trial_state` read them
and `proto_value` writes them.

What happens here, besides Determined's rules: the searcher ends an experiment
(COMPLETED, CANCELED or ERROR) straight from ACTIVE or PAUSED, without a
STOPPING_* state in between; a kill is recorded as STOPPING_KILLED until the
searcher ends it CANCELED; a trial stays ACTIVE until it ends (it is *shown*
RUNNING while its current run runs, and PAUSED while its experiment is paused
and nothing runs).

The web UI reads the same sets from `services/gateway/http/ui/states.js`,
generated from this module by `python -m services.gateway.http.states_js`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any


class ExperimentState(enum.StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    # `det experiment delete`: asked, failed (files are left; it may be asked again), done.
    DELETING = "DELETING"
    DELETE_FAILED = "DELETE_FAILED"
    DELETED = "DELETED"


class TrialState(enum.StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    STOPPING_COMPLETED = "STOPPING_COMPLETED"
    STOPPING_CANCELED = "STOPPING_CANCELED"
    STOPPING_KILLED = "STOPPING_KILLED"
    STOPPING_ERROR = "STOPPING_ERROR"
    COMPLETED = "COMPLETED"
    CANCELED = "CANCELED"
    ERROR = "ERROR"
    # Shown, never stored: an ACTIVE trial whose current run has started and not exited.
    RUNNING = "RUNNING"


class AllocationState(enum.StrEnum):
    """How one run of a trial (an allocation) stands, or how it ended."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    # Its code finished (exit 0).
    COMPLETED = "COMPLETED"
    # Asked to stop (pause, preemption, the searcher), and it did.
    STOPPED = "STOPPED"
    KILLED = "KILLED"
    # Taken back before or while it ran (its trial or experiment ended).
    CANCELED = "CANCELED"
    AGENT_LOST = "AGENT_LOST"
    FAILED = "FAILED"


class CheckpointState(enum.StrEnum):
    COMPLETED = "COMPLETED"
    # A deletion is requested; the files are going.
    DELETING = "DELETING"
    DELETED = "DELETED"
    # Some files are left: those globs spared, or those the storage refused to delete.
    PARTIALLY_DELETED = "PARTIALLY_DELETED"


class TaskType(enum.StrEnum):
    """What a task that is not a trial runs (AllocationRequested.task_type)."""

    NOTEBOOK = "NOTEBOOK"
    TENSORBOARD = "TENSORBOARD"
    COMMAND = "COMMAND"
    SHELL = "SHELL"


class TaskState(enum.StrEnum):
    """How a notebook, TensorBoard, command or shell stands (Determined's
    command states, less PULLING: agents report no image pull)."""

    # Waiting for slots.
    PENDING = "PENDING"
    # Given slots on an agent; its process has not started.
    ASSIGNED = "ASSIGNED"
    # Its process started; its server (JupyterLab, TensorBoard, sshd) does not answer yet.
    STARTING = "STARTING"
    # Its server answers (a command: its process runs).
    RUNNING = "RUNNING"
    # Asked to die; its process has not exited yet.
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"


E = ExperimentState
T = TrialState
A = AllocationState
C = CheckpointState

# The states after which an experiment or trial runs no more and changes no more
# (an experiment may still be deleted); the same names for both.
TERMINAL_STATES = frozenset({E.COMPLETED, E.CANCELED, E.ERROR})
# Asked to end, not ended yet (experiments and trials): STOPPING_X ends X, but
# STOPPING_KILLED ends CANCELED.
STOPPING_STATES = frozenset({E.STOPPING_COMPLETED, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR})
EXPERIMENT_DELETION_STATES = frozenset({E.DELETING, E.DELETE_FAILED, E.DELETED})
# An experiment that will not train again: ended, or being (or been) deleted.
EXPERIMENT_ENDED_STATES = TERMINAL_STATES | EXPERIMENT_DELETION_STATES
ALLOCATION_TERMINAL_STATES = frozenset(set(A) - {A.QUEUED, A.RUNNING})

EXPERIMENT_TRANSITIONS: Mapping[ExperimentState, frozenset[ExperimentState]] = {
    E.ACTIVE: frozenset({E.PAUSED, *STOPPING_STATES, *TERMINAL_STATES}),
    E.PAUSED: frozenset(
        {E.ACTIVE, E.STOPPING_CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR, *TERMINAL_STATES}
    ),
    E.STOPPING_COMPLETED: frozenset({E.COMPLETED, E.STOPPING_KILLED, E.STOPPING_ERROR, E.ERROR}),
    E.STOPPING_CANCELED: frozenset({E.CANCELED, E.STOPPING_KILLED, E.STOPPING_ERROR, E.ERROR}),
    E.STOPPING_KILLED: frozenset({E.CANCELED, E.STOPPING_ERROR, E.ERROR}),
    E.STOPPING_ERROR: frozenset({E.ERROR}),
    E.COMPLETED: frozenset({E.DELETING}),
    E.CANCELED: frozenset({E.DELETING}),
    E.ERROR: frozenset({E.DELETING}),
    E.DELETING: frozenset({E.DELETED, E.DELETE_FAILED}),
    E.DELETE_FAILED: frozenset({E.DELETING}),
    E.DELETED: frozenset(),
}
_TRIAL_ENDINGS = frozenset(T(s) for s in TERMINAL_STATES)
_TRIAL_LIVE = frozenset({T.PAUSED, *(T(s) for s in STOPPING_STATES), *_TRIAL_ENDINGS})
TRIAL_TRANSITIONS: Mapping[TrialState, frozenset[TrialState]] = {
    T.ACTIVE: _TRIAL_LIVE | {T.RUNNING},
    T.RUNNING: _TRIAL_LIVE | {T.ACTIVE},
    T.PAUSED: frozenset({T.ACTIVE, T.RUNNING, T.STOPPING_CANCELED, T.STOPPING_KILLED, T.STOPPING_ERROR})
    | _TRIAL_ENDINGS,
    T.STOPPING_COMPLETED: frozenset({T.COMPLETED, T.STOPPING_KILLED, T.STOPPING_ERROR, T.ERROR}),
    T.STOPPING_CANCELED: frozenset({T.CANCELED, T.STOPPING_KILLED, T.STOPPING_ERROR, T.ERROR}),
    T.STOPPING_KILLED: frozenset({T.CANCELED, T.STOPPING_ERROR, T.ERROR}),
    T.STOPPING_ERROR: frozenset({T.ERROR}),
    T.COMPLETED: frozenset(),
    T.CANCELED: frozenset(),
    T.ERROR: frozenset(),
}
ALLOCATION_TRANSITIONS: Mapping[AllocationState, frozenset[AllocationState]] = {
    A.QUEUED: frozenset({A.RUNNING, A.CANCELED}),
    A.RUNNING: ALLOCATION_TERMINAL_STATES,
    **{state: frozenset() for state in ALLOCATION_TERMINAL_STATES},
}
_TASK_ENDING = frozenset({TaskState.TERMINATING, TaskState.TERMINATED})
TASK_TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.ASSIGNED}) | _TASK_ENDING,
    TaskState.ASSIGNED: frozenset({TaskState.STARTING, TaskState.RUNNING}) | _TASK_ENDING,
    TaskState.STARTING: frozenset({TaskState.RUNNING}) | _TASK_ENDING,
    TaskState.RUNNING: _TASK_ENDING,
    TaskState.TERMINATING: frozenset({TaskState.TERMINATED}),
    TaskState.TERMINATED: frozenset(),
}
CHECKPOINT_TRANSITIONS: Mapping[CheckpointState, frozenset[CheckpointState]] = {
    C.COMPLETED: frozenset({C.DELETING}),
    C.DELETING: frozenset({C.DELETED, C.PARTIALLY_DELETED}),
    # Asked again, its deletion retries what the storage refused (or deletes the rest).
    C.PARTIALLY_DELETED: frozenset({C.DELETING}),
    C.DELETED: frozenset(),
}
# The checkpoints a deletion (or GC) may name: those with files left to delete.
CHECKPOINT_DELETABLE_STATES = frozenset(
    s for s, after in CHECKPOINT_TRANSITIONS.items() if C.DELETING in after
)
# The ends a detached run's script may say its trial reached (ReportUnmanagedTrialRequest.end_state).
DETACHED_TRIAL_ENDS = frozenset({T.COMPLETED, T.ERROR})
# An experiment may be deleted from these (ended, or a deletion that failed).
EXPERIMENT_DELETABLE_STATES = frozenset(
    s for s, after in EXPERIMENT_TRANSITIONS.items() if E.DELETING in after
)

State = ExperimentState | TrialState | AllocationState | CheckpointState | TaskState
_TRANSITIONS: Mapping[type[State], Mapping[Any, frozenset[State]]] = {
    ExperimentState: EXPERIMENT_TRANSITIONS,
    TrialState: TRIAL_TRANSITIONS,
    AllocationState: ALLOCATION_TRANSITIONS,
    CheckpointState: CHECKPOINT_TRANSITIONS,
    TaskState: TASK_TRANSITIONS,
}


def can_transition(current: State, new: str) -> bool:
    """Whether a `current` experiment, trial, run, checkpoint or task may change to
    `new` (a state of the same kind, or its string)."""
    return new in _TRANSITIONS[type(current)][current]


def is_terminal(state: str) -> bool:
    """An experiment or trial that has ended: COMPLETED, CANCELED or ERROR."""
    return state in TERMINAL_STATES


def is_stopping(state: str) -> bool:
    """An experiment or trial asked to end, that has not ended yet."""
    return state in STOPPING_STATES


def is_ended(state: str) -> bool:
    """An experiment that will not train again: terminal, or being (or been) deleted."""
    return state in EXPERIMENT_ENDED_STATES


_EXPERIMENT_PREFIX = "EXPERIMENT_STATE_"
_TRIAL_PREFIX = "TRIAL_STATE_"


def experiment_state(value: int | str) -> ExperimentState:
    """The state an event's ExperimentState value names (EXPERIMENT_STATE_ACTIVE
    or its number); a name without the prefix is taken as it is. ValueError for
    EXPERIMENT_STATE_UNSPECIFIED."""
    name = value if isinstance(value, str) else _proto_name("ExperimentState", value)
    return ExperimentState(name.removeprefix(_EXPERIMENT_PREFIX))


def trial_state(value: int | str) -> TrialState:
    """The state an event's TrialState value names (TRIAL_STATE_COMPLETED or its
    number); ValueError for TRIAL_STATE_UNSPECIFIED."""
    name = value if isinstance(value, str) else _proto_name("TrialState", value)
    return TrialState(name.removeprefix(_TRIAL_PREFIX))


def proto_value(state: ExperimentState | TrialState) -> int:
    """The proto enum value events carry for `state`; ValueError for a state
    events never carry (DELETING, RUNNING, ...)."""
    from determined.proto import events_pb2

    if isinstance(state, ExperimentState):
        return int(events_pb2.ExperimentState.Value(_EXPERIMENT_PREFIX + state))
    return int(events_pb2.TrialState.Value(_TRIAL_PREFIX + state))


def proto_values(kind: type[ExperimentState] | type[TrialState], names: Iterable[str]) -> frozenset[int]:
    """The proto enum values events carry for these states of `kind`: for the
    cores that test an event's state, e.g.
    `proto_values(ExperimentState, TERMINAL_STATES)`."""
    return frozenset(proto_value(kind(name)) for name in names)


def _proto_name(enum_name: str, value: int) -> str:
    """Imported here, not above: `determined.common` stays free of protobuf."""
    from determined.proto import events_pb2

    return str(getattr(events_pb2, enum_name).Name(value))


def task_exit_summary(exit_reason: str, exit_code: int | None) -> str:
    """How an ended task ended, in the words the CLI, the proxy and the web UI use:
    "exited with code 3", "killed by ann; exit code 137", "canceled before it started:
    killed by ann" (`exit_code` None: it never ran)."""
    if exit_code is None:
        return exit_reason or "it never ran"
    exited = f"exited with code {exit_code}"
    if exit_reason in ("", exited):
        return exited
    return f"{exit_reason}; exit code {exit_code}"
