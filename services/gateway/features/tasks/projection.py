"""How events change the tasks' rows (pure; see plan.py and projection.py for
the fold).

A task is the one AllocationRequested that carries a TaskLaunch; the events
of its allocation ("<task id>.1") change its row, found by the task id the
allocation id starts with (a trial's allocations name no task row, so they
change nothing here). Each rule sets absolute values, the first one kept
where the first one counts (when it was assigned, why it was asked to die),
and the state is worked out from the row after each change (`task_state`),
so the rows are the same however the log is cut into batches or however
often an event is applied.
"""

import json
from dataclasses import dataclass
from typing import Any

from determined.common.states import TaskState, TaskType
from determined.proto import events_pb2
from services.gateway.features.feature import Feature
from services.gateway.features.tasks.tables import tasks
from services.gateway.plan import Change, Plan, Row, created


def task_id_of(allocation_id: str) -> str:
    """The task an allocation id ("<task id>.<run>") belongs to."""
    return allocation_id.rpartition(".")[0]


def _change(plan: Plan, allocation_id: str, change: Change) -> None:
    """The change of the task the allocation belongs to; none for a trial's
    (its task id is the trial's number), so a trial's allocations load no task row."""
    task_id = task_id_of(allocation_id)
    if task_id and not task_id.isdigit():
        plan.change("tasks", task_id, change)


def task_state(row: Row) -> TaskState:
    """What the row's columns say: ended, asked to die, its server answering
    (a command: its process running), started, assigned, or waiting."""
    if row["ended_at_ns"] is not None:
        return TaskState.TERMINATED
    if row["kill_reason"] is not None:
        return TaskState.TERMINATING
    if row["proxy_address"] or (row["started_at_ns"] is not None and row["task_type"] == TaskType.COMMAND):
        return TaskState.RUNNING
    if row["started_at_ns"] is not None:
        return TaskState.STARTING
    if row["assigned_at_ns"] is not None:
        return TaskState.ASSIGNED
    return TaskState.PENDING


@dataclass(frozen=True)
class Exit:
    """What AllocationExited says of a task's end."""

    exit_code: int
    killed: bool
    agent_lost: bool
    error: str

    @classmethod
    def of(cls, exited: events_pb2.AllocationExited) -> "Exit":
        return cls(exited.exit_code, exited.killed, exited.agent_lost, exited.error)

    def reason(self, kill_reason: str | None) -> str:
        """Why the task ended, in words (`kill_reason`: why it was asked to die, if it was)."""
        if self.error:
            return self.error
        if self.agent_lost:
            return "its agent went away"
        if self.killed:
            return kill_reason or "killed"
        return f"exited with code {self.exit_code}"


def task_row(requested: events_pb2.AllocationRequested, at: int) -> Row:
    """A new task's row, from its AllocationRequested."""
    launch = requested.task
    row: Row = {
        "task_id": requested.task_id,
        "task_type": requested.task_type,
        "description": launch.description,
        "owner": requested.owner,
        "allocation_id": requested.allocation_id,
        "job_id": requested.job_id,
        "resource_pool": requested.resource_pool,
        "slots": requested.slots,
        "priority": requested.priority,
        "config_json": launch.config_json,
        "context_hash": launch.context_hash,
        "command": json.dumps(list(launch.command)),
        "experiment_ids": json.dumps(sorted({s.experiment_id for s in launch.tensorboard_sources})),
        "trial_ids": json.dumps(sorted({s.trial_id for s in launch.tensorboard_sources})),
        "requested_at_ns": at,
        "agent_id": "",
        "assigned_at_ns": None,
        "started_at_ns": None,
        "proxy_address": "",
        "kill_reason": None,
        "ended_at_ns": None,
        "exit_code": None,
        "exit_reason": "",
        "agent_lost": False,
    }
    row["state"] = task_state(row)
    return row


# -- the changes (module-level: plans are pickled) ---------------------------------------


def _assign(row: Row | None, agent_id: str, at: int) -> Row | None:
    if row is not None and row["assigned_at_ns"] is None:
        row["agent_id"], row["assigned_at_ns"] = agent_id, at
    return _restated(row)


def _start(row: Row | None, at: int) -> Row | None:
    if row is not None and row["started_at_ns"] is None:
        row["started_at_ns"] = at
    return _restated(row)


def _ready(row: Row | None, proxy_address: str) -> Row | None:
    if row is not None:
        row["proxy_address"] = proxy_address
    return _restated(row)


def _kill(row: Row | None, reason: str) -> Row | None:
    if row is not None and row["kill_reason"] is None:
        row["kill_reason"] = reason or "killed"
    return _restated(row)


def _cancel(row: Row | None, reason: str, at: int) -> Row | None:
    """Withdrawn before it got slots: nothing ran (no exit code)."""
    if row is not None and row["ended_at_ns"] is None:
        row["ended_at_ns"] = at
        row["exit_reason"] = f"canceled before it started: {row['kill_reason'] or reason or 'withdrawn'}"
    return _restated(row)


def _exit(row: Row | None, exited: Exit, at: int) -> Row | None:
    if row is not None and row["ended_at_ns"] is None:
        row["ended_at_ns"] = at
        # An error means its process never ran: no exit code to show.
        row["exit_code"] = None if exited.error else exited.exit_code
        row["exit_reason"] = exited.reason(row["kill_reason"])
        row["agent_lost"] = exited.agent_lost
    return _restated(row)


def _set_resources(row: Row | None, changes: dict[str, Any]) -> Row | None:
    """Its job's new priority or weight (UpdateJob), in its row and its config."""
    if row is not None:
        config = json.loads(row["config_json"] or "{}")
        config["resources"] = {**(config.get("resources") or {}), **changes}
        row["config_json"] = json.dumps(config, sort_keys=True)
        row["priority"] = changes.get("priority", row["priority"])
    return row


def _restated(row: Row | None) -> Row | None:
    if row is not None:
        row["state"] = task_state(row)
    return row


# -- the rules ------------------------------------------------------------------------------


def _allocation_requested(plan: Plan, payload: events_pb2.AllocationRequested, at: int) -> None:
    if payload.HasField("task"):
        plan.change("tasks", payload.task_id, created(task_row(payload, at)))


def _allocation_assigned(plan: Plan, payload: events_pb2.AllocationAssigned, at: int) -> None:
    agent_id = payload.placements[0].agent_id if payload.placements else payload.agent_id
    _change(plan, payload.allocation_id, (_assign, (agent_id, at)))


def _allocation_started(plan: Plan, payload: events_pb2.AllocationStarted, at: int) -> None:
    _change(plan, payload.allocation_id, (_start, (at,)))


def _allocation_ready(plan: Plan, payload: events_pb2.AllocationReady, at: int) -> None:
    _change(plan, payload.allocation_id, (_ready, (payload.proxy_address,)))


def _allocation_kill_requested(plan: Plan, payload: events_pb2.AllocationKillRequested, at: int) -> None:
    _change(plan, payload.allocation_id, (_kill, (payload.reason,)))


def _allocation_canceled(plan: Plan, payload: events_pb2.AllocationCanceled, at: int) -> None:
    _change(plan, payload.allocation_id, (_cancel, (payload.reason, at)))


def _allocation_exited(plan: Plan, payload: events_pb2.AllocationExited, at: int) -> None:
    _change(plan, payload.allocation_id, (_exit, (Exit.of(payload), at)))


def _job_resources_changed(plan: Plan, payload: events_pb2.JobResourcesChanged, at: int) -> None:
    kind, _, task_id = payload.job_id.partition("/")
    changes = {name: getattr(payload, name) for name in ("priority", "weight") if payload.HasField(name)}
    if kind == "task" and changes:
        plan.change("tasks", task_id, (_set_resources, (changes,)))


FEATURE = Feature(
    "tasks",
    row_tables=(tasks,),
    rules={
        "allocation_requested": _allocation_requested,
        "allocation_assigned": _allocation_assigned,
        "allocation_started": _allocation_started,
        "allocation_ready": _allocation_ready,
        "allocation_kill_requested": _allocation_kill_requested,
        "allocation_canceled": _allocation_canceled,
        "allocation_exited": _allocation_exited,
        "job_resources_changed": _job_resources_changed,
    },
)
