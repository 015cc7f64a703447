"""`det trial describe`'s runs: how each run (allocation row) stands or ended."""

from typing import Any

import pytest

from services.gateway.features.trials.queries import run_message, run_outcome


def row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "allocation_id": "7.2",
        "trial_run_id": 2,
        "placements": None,
        "canceled": False,
        "exited_at_ns": None,
        "agent_lost": False,
        "stop_requested": False,
        "stop_reason": None,
        "killed": False,
        "exit_code": None,
        "error": None,
        "requested_at_ns": 1,
        "assigned_at_ns": None,
    }
    return base | changes


PLACED = [{"agent_id": "agent-1", "slot_ids": [0, 1]}, {"agent_id": "agent-2", "slot_ids": [0, 1]}]


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, ("QUEUED", "")),
        ({"placements": PLACED}, ("RUNNING", "")),
        ({"canceled": True, "stop_reason": "experiment paused"}, ("CANCELED", "experiment paused")),
        ({"exited_at_ns": 9, "exit_code": 0}, ("COMPLETED", "")),
        (
            {
                "exited_at_ns": 9,
                "exit_code": -1,
                "agent_lost": True,
                "error": "agent agent-2 lost: no heartbeat",
            },
            ("AGENT_LOST", "agent agent-2 lost: no heartbeat"),
        ),
        (
            {
                "exited_at_ns": 9,
                "exit_code": 0,
                "stop_requested": True,
                "stop_reason": "preempted by the scheduler",
            },
            ("STOPPED", "preempted by the scheduler"),
        ),
        (
            {
                "exited_at_ns": 9,
                "exit_code": -9,
                "killed": True,
                "stop_requested": True,
                "stop_reason": "paused",
            },
            ("STOPPED", "paused"),
        ),
        ({"exited_at_ns": 9, "exit_code": -9, "killed": True}, ("KILLED", "")),
        ({"exited_at_ns": 9, "exit_code": 1, "stop_requested": True}, ("FAILED", "exit code 1")),
        ({"exited_at_ns": 9, "exit_code": 0, "error": "no context"}, ("FAILED", "no context")),
    ],
)
def test_a_run_says_how_it_stands_or_ended(changes: dict[str, Any], expected: tuple[str, str]) -> None:
    assert run_outcome(row(**changes)) == expected


def test_a_run_names_its_agents_chief_first() -> None:
    run = run_message(row(placements=PLACED, assigned_at_ns=5))
    assert list(run.agent_ids) == ["agent-1", "agent-2"]
    assert (run.state, run.assigned_at_ns, run.exited_at_ns) == ("RUNNING", 5, 0)
