"""Notebooks, TensorBoards, commands and shells are scheduled as trials are:
slots, pools, priority and fair share; a 0-slot task still lands on an
agent; a task is never preempted; a kill before its assignment cancels it.
What the scheduler reads of a task is its request: its spec is the agent's."""

import json

from test_scheduler_rules import FAIR, PRIO, Run, agent, exited, kill, placed, preempted, requested

from determined.proto import events_pb2 as ev
from services.common.envelope import Append

TASK = "0b5d8c1e-6f1a-4c1e-9d1a-2b3c4d5e6f70"


def task(
    task_id: str = TASK,
    slots: int = 1,
    task_type: str = "NOTEBOOK",
    pool: str = "",
    priority: int = 0,
) -> ev.AllocationRequested:
    """As the gateway appends one: its own job, not preemptible."""
    return ev.AllocationRequested(
        allocation_id=f"{task_id}.1",
        task_id=task_id,
        task_type=task_type,
        slots=slots,
        resource_pool=pool,
        job_id=f"task/{task_id}",
        weight=1.0,
        priority=priority,
        preemptible=False,
        owner="alice",
        task=ev.TaskLaunch(config_json=json.dumps({"resources": {"slots": slots}})),
    )


def canceled(appends: list[Append]) -> list[str]:
    return [a.payload.allocation_id for a in appends if isinstance(a.payload, ev.AllocationCanceled)]


def test_a_notebook_gets_its_slot_like_a_trial() -> None:
    run = Run().given(agent("a", 2), task())
    assert placed(run.settle()) == {f"{TASK}.1": [("a", [0])]}


def test_a_zero_slot_tensorboard_lands_on_a_full_agent_and_takes_nothing() -> None:
    run = Run().given(agent("a", 1), requested("1.1"))
    run.settle()
    run.given(task(slots=0, task_type="TENSORBOARD"), requested("2.1", experiment=2))
    assert placed(run.settle()) == {f"{TASK}.1": [("a", [])]}
    run.given(exited("1.1"))
    assert placed(run.settle()) == {"2.1": [("a", [0])]}  # the slot was the trial's to give back


def test_a_zero_slot_task_waits_for_an_agent_in_its_pool() -> None:
    run = Run().given(agent("a", 1), task(slots=0, pool="gpus"))
    assert placed(run.settle()) == {}
    run.given(agent("b", 0, pool="gpus"))
    assert placed(run.settle()) == {f"{TASK}.1": [("b", [])]}


def test_a_task_asks_for_its_pool() -> None:
    run = Run().given(agent("a", 1), agent("b", 1, pool="cpu"), task(pool="cpu"))
    assert placed(run.settle()) == {f"{TASK}.1": [("b", [0])]}


def test_fair_share_never_preempts_a_task() -> None:
    """A job over its share gives back only what is preemptible: a task is not."""
    run = Run(FAIR).given(agent("a", 2), task("t1"), task("t2"), at=0)
    run.settle()
    run.given(requested("1.1", experiment=1), requested("2.1", experiment=1), at=100)
    assert run.settle() == []
    assert preempted(run.decide()) == []
    run.given(exited("t1.1"), at=200)
    assert placed(run.settle()) == {"1.1": [("a", [0])]}


def test_priority_never_preempts_a_task() -> None:
    run = Run(PRIO).given(agent("a", 1), task(priority=50), at=0)
    run.settle()
    run.given(requested("1.1", priority=1), at=100)
    assert run.settle() == []


def test_a_tasks_priority_orders_it_in_the_queue() -> None:
    run = Run(PRIO).given(agent("a", 1), requested("1.1"), at=0)
    run.settle()
    run.given(requested("2.1", experiment=2, priority=40), task(priority=10))
    run.given(exited("1.1"))
    assert placed(run.settle()) == {f"{TASK}.1": [("a", [0])]}


def test_set_priority_on_a_tasks_job_applies_to_it() -> None:
    """`det notebook set priority`: JobResourcesChanged on job task/<id>."""
    run = Run(PRIO).given(agent("a", 1), requested("1.1"), at=0)
    run.settle()
    run.given(requested("2.1", experiment=2, priority=40), task(priority=60))
    run.given(ev.JobResourcesChanged(job_id=f"task/{TASK}", priority=5))
    run.given(exited("1.1"))
    assert placed(run.settle()) == {f"{TASK}.1": [("a", [0])]}


def test_a_task_killed_before_its_slots_is_canceled() -> None:
    run = Run().given(agent("a", 1), requested("1.1"))
    run.settle()
    run.given(task(), kill(f"{TASK}.1"))
    assert canceled(run.settle()) == [f"{TASK}.1"]
    assert f"{TASK}.1" not in run.state.requests


def test_a_task_runs_on_one_agent_never_spread_over_several() -> None:
    run = Run().given(agent("a", 1), agent("b", 1), task(slots=2))
    assert placed(run.settle()) == {}
    assert (
        run.queue()[f"task/{TASK}"][4]
        == "needs 2 slots on one agent; the largest agent of pool 'default' has 1"
    )
    run.given(agent("c", 2))
    assert placed(run.settle()) == {f"{TASK}.1": [("c", [0, 1])]}


def test_a_task_waits_for_one_agent_with_room_under_priority() -> None:
    run = Run(PRIO).given(agent("a", 2), agent("b", 2))
    run.given(requested("1.1"), requested("2.1", experiment=2), requested("3.1", experiment=3))
    assert placed(run.settle()) == {"1.1": [("a", [0])], "2.1": [("a", [1])], "3.1": [("b", [0])]}
    run.given(exited("2.1"), task(slots=2))  # a slot free on a and one on b: not one agent's two
    assert placed(run.settle()) == {}
    run.given(exited("1.1"))
    assert placed(run.settle()) == {f"{TASK}.1": [("a", [0, 1])]}


def test_a_trial_still_spans_agents() -> None:
    run = Run().given(agent("a", 1), agent("b", 1), requested("1.1", slots=2))
    assert placed(run.settle()) == {"1.1": [("a", [0]), ("b", [0])]}
