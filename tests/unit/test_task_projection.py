"""The tasks' read model (pure): the row a task's events leave, folded however
the log is cut into batches or replayed, the state each row shows, and the
Task and ProxyTarget the queries make of it."""

import itertools
import json
from typing import Any

import pytest

from determined.common import states
from determined.common.states import TaskState
from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.gateway import projection
from services.gateway.features.tasks.projection import task_id_of, task_state
from services.gateway.features.tasks.queries import task_message

Row = dict[str, Any]
TASK = "6f1c2d3e-4a5b-4c6d-8e7f-a1b2c3d4e5f6"
ALLOCATION = f"{TASK}.1"


def envelope(payload: object, at: int) -> ev.Envelope:
    return wrap(Append("x/1", payload, "m"), actor="service:test", occurred_at_ns=at)  # type: ignore[arg-type]


def requested(task_type: str = "NOTEBOOK", **launch: Any) -> ev.AllocationRequested:
    return ev.AllocationRequested(
        allocation_id=ALLOCATION,
        task_id=TASK,
        task_type=task_type,
        slots=1,
        resource_pool="gpu",
        job_id=f"task/{TASK}",
        priority=7,
        owner="alice",
        task=ev.TaskLaunch(description="JupyterLab (x)", config_json='{"debug": false}', **launch),
    )


ASSIGNED = ev.AllocationAssigned(
    allocation_id=ALLOCATION, task_id=TASK, placements=[ev.Placement(agent_id="a1", slot_ids=[0])]
)
STARTED = ev.AllocationStarted(allocation_id=ALLOCATION, agent_id="a1", pid=9)
READY = ev.AllocationReady(allocation_id=ALLOCATION, task_id=TASK, agent_id="a1", proxy_address="h:4000")
KILL = ev.AllocationKillRequested(allocation_id=ALLOCATION, task_id=TASK, reason="killed by bob")
IDLE = ev.AllocationKillRequested(allocation_id=ALLOCATION, task_id=TASK, reason="idle_timeout: 30s")


def exited(code: int = 0, **fields: Any) -> ev.AllocationExited:
    return ev.AllocationExited(
        allocation_id=ALLOCATION, task_id=TASK, agent_id="a1", exit_code=code, **fields
    )


def folded(*payloads: object, batches: int = 1, repeated: bool = False) -> Row | None:
    """The task's row after the events (times 10, 20, ...), applied in
    `batches` batches; `repeated`: each event twice, as a replay may."""
    envelopes = [envelope(payload, at=10 * (n + 1)) for n, payload in enumerate(payloads)]
    if repeated:
        envelopes = [e for pair in zip(envelopes, envelopes, strict=True) for e in pair]
    size = max(1, -(-len(envelopes) // batches))
    stored: dict[str, dict[Any, Row]] = {"tasks": {}}
    for start in range(0, len(envelopes), size):
        for row in projection.plan_batch(envelopes[start : start + size]).rows(stored).get("tasks", []):
            stored["tasks"][row["task_id"]] = row
    return stored["tasks"].get(TASK)


def test_a_request_with_a_task_spec_makes_a_pending_task() -> None:
    source = ev.TensorboardSource(experiment_id=3, trial_id=8, storage_json="{}")
    row = folded(requested("TENSORBOARD", command=[], tensorboard_sources=[source]))
    assert row is not None
    assert (row["task_type"], row["owner"], row["state"], row["requested_at_ns"]) == (
        "TENSORBOARD",
        "alice",
        "PENDING",
        10,
    )
    assert (row["allocation_id"], row["job_id"], row["resource_pool"], row["slots"], row["priority"]) == (
        ALLOCATION,
        f"task/{TASK}",
        "gpu",
        1,
        7,
    )
    assert (json.loads(row["experiment_ids"]), json.loads(row["trial_ids"])) == ([3], [8])
    assert (row["proxy_address"], row["kill_reason"], row["ended_at_ns"], row["exit_code"]) == (
        "",
        None,
        None,
        None,
    )


def test_a_trials_request_and_its_allocation_events_make_no_task() -> None:
    trial = ev.AllocationRequested(allocation_id="12.1", task_id="12", trial=ev.TrialLaunch(trial_id=12))
    envelopes = [envelope(trial, 1), envelope(ev.AllocationExited(allocation_id="12.1"), 2)]
    assert projection.plan_batch(envelopes).rows({}).get("tasks", []) == []


def test_allocation_events_still_change_a_trials_run() -> None:
    """Both features fold an allocation's events: a trial's run row as before."""
    trial = ev.AllocationRequested(
        allocation_id="12.1", task_id="12", trial=ev.TrialLaunch(trial_id=12, trial_run_id=1)
    )
    rows = projection.plan_batch(
        [envelope(trial, 1), envelope(ev.AllocationStarted(allocation_id="12.1"), 2)]
    ).rows({})
    [allocation] = rows["allocations"]
    assert (allocation["allocation_id"], allocation["started_at_ns"]) == ("12.1", 2)


@pytest.mark.parametrize(
    ("task_type", "events", "state"),
    [
        ("NOTEBOOK", [ASSIGNED], TaskState.ASSIGNED),
        ("NOTEBOOK", [ASSIGNED, STARTED], TaskState.STARTING),
        ("NOTEBOOK", [ASSIGNED, STARTED, READY], TaskState.RUNNING),
        ("COMMAND", [ASSIGNED, STARTED], TaskState.RUNNING),
        ("SHELL", [ASSIGNED, STARTED], TaskState.STARTING),
        ("NOTEBOOK", [KILL], TaskState.TERMINATING),
        ("NOTEBOOK", [ASSIGNED, STARTED, READY, KILL], TaskState.TERMINATING),
        ("NOTEBOOK", [ASSIGNED, STARTED, KILL, READY], TaskState.TERMINATING),
        ("NOTEBOOK", [ASSIGNED, STARTED, READY, exited(1)], TaskState.TERMINATED),
        (
            "NOTEBOOK",
            [KILL, ev.AllocationCanceled(allocation_id=ALLOCATION, reason="killed")],
            TaskState.TERMINATED,
        ),
    ],
)
def test_each_event_moves_the_task_on(task_type: str, events: list[object], state: TaskState) -> None:
    row = folded(requested(task_type), *events)
    assert row is not None and row["state"] == state


def test_an_assignment_names_its_agent_and_the_first_time_counts() -> None:
    row = folded(requested(), ASSIGNED, ASSIGNED, STARTED, STARTED, READY)
    assert row is not None
    assert (row["agent_id"], row["assigned_at_ns"], row["started_at_ns"], row["proxy_address"]) == (
        "a1",
        20,
        40,
        "h:4000",
    )


@pytest.mark.parametrize(
    ("events", "code", "reason", "summary"),
    [
        ([exited(3)], 3, "exited with code 3", "exited with code 3"),
        ([exited(0)], 0, "exited with code 0", "exited with code 0"),
        ([KILL, exited(143, killed=True)], 143, "killed by bob", "killed by bob; exit code 143"),
        ([IDLE, KILL, exited(143, killed=True)], 143, "idle_timeout: 30s", "idle_timeout: 30s; exit code 143"),
        ([exited(137, killed=True)], 137, "killed", "killed; exit code 137"),
        ([exited(1, error="could not extract the context")], None, "could not extract the context",
         "could not extract the context"),
        ([exited(255, agent_lost=True)], 255, "its agent went away", "its agent went away; exit code 255"),
        ([KILL, ev.AllocationCanceled(allocation_id=ALLOCATION, reason="killed by bob")], None,
         "canceled before it started: killed by bob", "canceled before it started: killed by bob"),
    ],
)  # fmt: skip
def test_how_a_task_ended_in_words(events: list[object], code: int | None, reason: str, summary: str) -> None:
    row = folded(requested(), ASSIGNED, *events)
    assert row is not None
    assert (
        row["state"],
        row["exit_code"],
        row["exit_reason"],
        states.task_exit_summary(row["exit_reason"], row["exit_code"]),
    ) == (
        "TERMINATED",
        code,
        reason,
        summary,
    )


def test_the_first_end_stands() -> None:
    row = folded(
        requested(), exited(3), exited(4), ev.AllocationCanceled(allocation_id=ALLOCATION, reason="late")
    )
    assert row is not None
    assert (row["ended_at_ns"], row["exit_code"], row["exit_reason"]) == (20, 3, "exited with code 3")


@pytest.mark.parametrize("batches", [1, 2, 3, 7])
def test_the_row_is_the_same_however_the_log_is_batched_or_repeated(batches: int) -> None:
    events = [requested(), ASSIGNED, STARTED, READY, IDLE, KILL, exited(143, killed=True)]
    once = folded(*events)
    assert folded(*events, batches=batches) == once
    assert folded(*events, batches=batches, repeated=True) == once


def test_task_id_of_an_allocation() -> None:
    assert task_id_of(ALLOCATION) == TASK
    assert task_id_of("12.3") == "12"
    assert task_id_of("no-dot") == ""


def test_every_state_the_rules_give_is_reachable_by_the_vocabularys_transitions() -> None:
    sequence = [requested(), ASSIGNED, STARTED, READY, KILL, exited(143, killed=True)]
    shown = [task_state(row) for row in (folded(*sequence[: n + 1]) for n in range(len(sequence))) if row]
    for before, after in itertools.pairwise(shown):
        assert before == after or states.can_transition(before, after), (before, after)


def test_the_task_message_and_its_readiness() -> None:
    row = folded(requested("COMMAND", command=["echo", "hi"]), ASSIGNED, STARTED, READY)
    assert row is not None
    task = task_message(row)
    assert (
        task.id,
        task.task_type,
        task.state,
        task.ready,
        list(task.command),
        task.HasField("exit_code"),
    ) == (
        TASK,
        "COMMAND",
        "RUNNING",
        True,
        ["echo", "hi"],
        False,
    )
    ended = folded(requested(), ASSIGNED, STARTED, READY, exited(0))
    assert ended is not None
    message = task_message(ended)
    assert (message.ready, message.exit_code, message.end_time_ns) == (False, 0, 50)


def test_a_tasks_job_change_shows_its_priority_and_weight() -> None:
    changed = ev.JobResourcesChanged(job_id=f"task/{TASK}", priority=5, weight=2.0)
    row = folded(requested(), changed)
    assert row is not None
    assert (row["priority"], json.loads(row["config_json"])["resources"]) == (
        5,
        {"priority": 5, "weight": 2.0},
    )
    experiments = ev.JobResourcesChanged(job_id="experiment/7", priority=5)
    assert folded(requested(), experiments) == folded(requested())
