"""A pause quickly followed by an activation: the pause's stop is withdrawn
before the trial acts on it (services/common/stops.py), and the lifecycle, the
scheduler and the agent honour the withdrawal.

The cores run together on one log (`Cluster` of test_lifecycle_core.py, where
an event's id is its msg id, as in the store). The last test tries every order
of pauses, activations, the trial's acknowledgement and the lifecycle's
decisions, a decision landing after events it did not see (a race).
"""

import itertools
from collections import Counter
from dataclasses import dataclass, field

import pytest
from google.protobuf.message import Message
from test_lifecycle_core import (
    ACTIVATED,
    PAUSED,
    Cluster,
    ack,
    ended,
    exited,
    experiment,
    msg_ids,
    searcher_stop,
    started,
    trial,
)

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, aggregate, wrap
from services.common.stops import NO_STOP, Stops
from services.gateway import projection
from services.gateway.features.trials.projection import allocation_row

TS = ev.TrialState


def running(**config: object) -> Cluster:
    """Agent "a" runs trial 1's first run, 1.1, of experiment 1 (active)."""
    cluster = Cluster().post(
        ev.AgentRegistered(agent_id="a", slots=[ev.Slot()]), experiment(**config), trial(1)
    )
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.1", "allocation-assigned-1.1"]
    cluster.post(started("1.1"))
    return cluster


def stop_requested(event_id: str) -> Append:
    stop = ev.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="preempted by the scheduler")
    return Append(aggregate("allocation", "1.1"), stop, event_id)


def asked_to_stop(cluster: Cluster) -> tuple[bool, bool, bool]:
    """Whether the lifecycle, the scheduler and the agent hold run 1.1 asked to stop."""
    run = cluster.lifecycle.trials[1].run
    assert run is not None
    request = cluster.states["scheduler"].requests["1.1"]
    allocation = cluster.states["agent"].allocations["1.1"]
    return run.stops.requested, request.withdrawn, allocation.stop_requested


def withdrawals(cluster: Cluster) -> list[ev.AllocationStopWithdrawn]:
    return [e.allocation_stop_withdrawn for e in cluster.log if e.HasField("allocation_stop_withdrawn")]


# -- the stops of one allocation ------------------------------------------------------


def request(event_id: str) -> tuple[str, Message]:
    return event_id, ev.AllocationStopRequested(allocation_id="1.1")


def withdrawal(of: str) -> tuple[str, Message]:
    return f"withdrawn-{of}", ev.AllocationStopWithdrawn(allocation_id="1.1", stop_event_id=of)


ACK = ("ack", ev.AllocationStopAcknowledged(allocation_id="1.1"))


@pytest.mark.parametrize(
    "events",
    [
        order
        for order in itertools.permutations([request("pause"), request("preempt"), withdrawal("pause"), ACK])
        if order.index(request("pause")) < order.index(withdrawal("pause"))
    ],
    ids=lambda order: ",".join(event_id for event_id, _ in order),
)
def test_a_withdrawal_takes_back_its_own_request_only_and_never_an_acknowledged_stop(
    events: tuple[tuple[str, Message], ...],
) -> None:
    stops = NO_STOP
    for event_id, event in events:
        stops = stops.folded(event_id, event)
        assert stops.folded(event_id, event) == stops  # folding an event twice changes nothing
    assert stops == Stops(standing=frozenset({"preempt"}), acknowledged=True)
    without_preempt = [(i, e) for i, e in events if i != "preempt"]
    without_ack = [(i, e) for i, e in events if i != "ack"]
    assert _folded(without_preempt).requested  # acknowledged: it stands
    assert _folded(without_ack).requested  # the preemption stands
    assert not _folded([(i, e) for i, e in without_ack if i != "preempt"]).requested


def _folded(events: list[tuple[str, Message]]) -> Stops:
    stops = NO_STOP
    for event_id, event in events:
        stops = stops.folded(event_id, event)
    return stops


# -- the lifecycle with the scheduler and the agent -------------------------------------


def test_an_activation_before_the_acknowledgement_withdraws_the_pause_and_the_trial_runs_on() -> None:
    cluster = running().post(PAUSED)
    assert msg_ids(cluster.settle()) == ["allocation-stop-1.1"]
    assert asked_to_stop(cluster) == (True, True, True)
    cluster.post(ACTIVATED)
    assert msg_ids(cluster.settle()) == ["allocation-stop-withdrawn-1.1-1"]
    [withdrawn] = withdrawals(cluster)
    assert (withdrawn.allocation_id, withdrawn.task_id) == ("1.1", "1")
    assert (withdrawn.stop_event_id, withdrawn.reason) == ("allocation-stop-1.1", "experiment activated")
    assert asked_to_stop(cluster) == (False, False, False)
    cluster.post(exited("1.1", 0))  # the trial's code finished
    assert ended(cluster.settle()) == [(1, TS.TRIAL_STATE_COMPLETED, "")]


def test_each_pause_asks_anew_and_each_activation_withdraws_its_own_stop() -> None:
    cluster = running()
    decided = []
    for change in (PAUSED, ACTIVATED, PAUSED, ACTIVATED, PAUSED):
        decided += msg_ids(cluster.post(change).settle())
    assert decided == [
        "allocation-stop-1.1",
        "allocation-stop-withdrawn-1.1-1",
        "allocation-stop-1.1-2",
        "allocation-stop-withdrawn-1.1-2",
        "allocation-stop-1.1-3",
    ]
    assert [w.stop_event_id for w in withdrawals(cluster)] == ["allocation-stop-1.1", "allocation-stop-1.1-2"]
    assert asked_to_stop(cluster) == (True, True, True)
    cluster.post(ack("1.1"), exited("1.1", 0))
    assert cluster.settle() == []  # stopped, waits for the activation
    cluster.post(ACTIVATED)
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.2", "allocation-assigned-1.2"]


def test_an_acknowledged_stop_is_not_withdrawn_and_the_run_resumes() -> None:
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(ack("1.1"), ACTIVATED)
    assert cluster.settle() == []
    cluster.post(exited("1.1", 0))
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.2", "allocation-assigned-1.2"]


def test_an_acknowledgement_stored_after_the_withdrawal_still_means_stopped() -> None:
    """The gateway took the acknowledgement on a read model that had not seen
    the withdrawal yet: the trial exits to be resumed, and so it is."""
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(ACTIVATED)
    assert msg_ids(cluster.settle()) == ["allocation-stop-withdrawn-1.1-1"]
    cluster.post(ack("1.1"))
    assert cluster.settle() == [] and asked_to_stop(cluster)[0]
    cluster.post(exited("1.1", 0))
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.2", "allocation-assigned-1.2"]


def test_a_withdrawal_decided_before_the_acknowledgement_was_folded_changes_nothing() -> None:
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(ACTIVATED)
    stale = cluster.cores["lifecycle"].decide(cluster.lifecycle)
    assert msg_ids(stale) == ["allocation-stop-withdrawn-1.1-1"]
    cluster.post(ack("1.1"))  # the trial's acknowledgement lands first
    cluster.append(stale[0], actor="service:lifecycle")
    assert asked_to_stop(cluster)[0]  # the stop stands for the lifecycle
    cluster.post(exited("1.1", 0))
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.2", "allocation-assigned-1.2"]


def test_a_searcher_stop_is_not_withdrawn() -> None:
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(searcher_stop(1), ACTIVATED)
    assert cluster.settle() == []
    assert asked_to_stop(cluster) == (True, True, True)
    cluster.post(exited("1.1", 0))
    assert ended(cluster.settle()) == [(1, TS.TRIAL_STATE_COMPLETED, "cut at rung 1 (234 batches)")]


def test_another_parts_stop_is_not_withdrawn() -> None:
    cluster = running()
    cluster.append(stop_requested("allocation-preempt-1.1"), actor="service:scheduler")
    cluster.post(PAUSED)
    assert cluster.settle() == []  # asked to stop already
    cluster.post(ACTIVATED)
    assert cluster.settle() == []
    assert asked_to_stop(cluster) == (True, True, True)


def test_a_preemption_landing_before_the_withdrawal_still_stands() -> None:
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(ACTIVATED)
    stale = cluster.cores["lifecycle"].decide(cluster.lifecycle)
    cluster.append(stop_requested("allocation-preempt-1.1"), actor="service:scheduler")
    cluster.append(stale[0], actor="service:lifecycle")
    assert [w.stop_event_id for w in withdrawals(cluster)] == ["allocation-stop-1.1"]
    assert asked_to_stop(cluster) == (True, True, True)
    assert cluster.settle() == []


def test_a_kill_past_the_grace_period_of_a_withdrawn_stop_is_no_failure() -> None:
    """The agent's grace period ran out just as the withdrawal was stored."""
    cluster = running(max_restarts=0).post(PAUSED)
    cluster.settle()
    cluster.post(ACTIVATED)
    cluster.settle()
    cluster.post(exited("1.1", -9, killed=True))
    assert msg_ids(cluster.settle()) == ["allocation-requested-1.2", "allocation-assigned-1.2"]
    assert cluster.lifecycle.trials[1].restarts == 0


def test_a_withdrawal_stored_twice_counts_once() -> None:
    cluster = running().post(PAUSED)
    cluster.settle()
    cluster.post(ACTIVATED)
    [withdrawn] = cluster.settle()
    cluster.post(withdrawn.payload)  # the same withdrawal again, under another id
    cluster.post(PAUSED)
    assert msg_ids(cluster.settle()) == ["allocation-stop-1.1-2"]


def test_a_pending_run_whose_stop_is_withdrawn_before_it_is_canceled_stays_queued() -> None:
    cluster = Cluster().post(experiment(), trial(1))
    cluster.settle("lifecycle")  # no agent yet: 1.1 waits for slots
    cluster.post(PAUSED)
    cluster.settle("lifecycle")
    cluster.post(ACTIVATED)
    assert msg_ids(cluster.settle("lifecycle")) == ["allocation-stop-withdrawn-1.1-1"]
    cluster.post(ev.AgentRegistered(agent_id="a", slots=[ev.Slot()]))
    assert msg_ids(cluster.settle()) == ["allocation-assigned-1.1"]  # not canceled
    assert not cluster.states["agent"].allocations["1.1"].stop_requested


# -- the gateway's read model ----------------------------------------------------------


def stop_rows(*events: tuple[str, Message]) -> list[tuple[bool, str | None, str]]:
    """The allocation row's (stop_requested, stop_reason, stop_requests) after each event."""
    launch = ev.TrialLaunch(trial_id=1, trial_run_id=1)
    row: dict[str, object] | None = allocation_row("1.1", launch, 1)
    seen = []
    for event_id, event in events:
        stored = wrap(Append(aggregate("allocation", "1.1"), event, event_id), actor="test", occurred_at_ns=2)
        rows = projection.plan_batch([stored]).rows({"allocations": {"1.1": row}})["allocations"]
        row = rows[0] if rows else row
        assert row is not None
        seen.append((row["stop_requested"], row["stop_reason"], row["stop_requests"]))
    return seen


def test_the_read_model_shows_a_stop_while_a_request_stands_or_it_was_acknowledged() -> None:
    paused = ev.AllocationStopRequested(allocation_id="1.1", reason="experiment paused")
    preempted = ev.AllocationStopRequested(allocation_id="1.1", reason="preempted by the scheduler")
    assert stop_rows(
        ("allocation-stop-1.1", paused),
        withdrawal("allocation-stop-1.1"),
        ("allocation-preempt-1.1", preempted),
        ("allocation-stop-1.1-2", paused),
        withdrawal("allocation-stop-1.1-2"),
        ACK,
        withdrawal("allocation-preempt-1.1"),
    ) == [
        (True, "experiment paused", '["allocation-stop-1.1"]'),
        (False, None, "[]"),
        (True, "preempted by the scheduler", '["allocation-preempt-1.1"]'),
        (True, "preempted by the scheduler", '["allocation-preempt-1.1", "allocation-stop-1.1-2"]'),
        (True, "preempted by the scheduler", '["allocation-preempt-1.1"]'),
        (True, "preempted by the scheduler", '["allocation-preempt-1.1"]'),
        (True, "preempted by the scheduler", "[]"),  # acknowledged: it stands
    ]


# -- every order -------------------------------------------------------------------------


@dataclass
class World:
    """Run 1.1 on agent "a", and what may happen to it: a user pauses or
    activates; the trial acknowledges a stop it saw (the gateway takes it while
    its read model shows a stop, which may lag behind a withdrawal); the
    lifecycle decides, and appends what it decided later (other events may
    land in between). The scheduler and the agent settle after each step."""

    cluster: Cluster = field(default_factory=running)
    pending: list[Append] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)

    def possible(self) -> list[str]:
        lifecycle = self.cluster.cores["lifecycle"]
        steps = ["activate" if self.paused else "pause"]  # the gateway appends a change only
        asked = any(e.HasField("allocation_stop_requested") for e in self.cluster.log)
        if asked and not any(e.HasField("allocation_stop_acknowledged") for e in self.cluster.log):
            steps.append("ack")
        decided = lifecycle.decide(self.cluster.lifecycle)
        if decided and msg_ids(decided) != msg_ids(self.pending):
            steps.append("decide")
        if self.pending:
            steps.append("append")
        return steps

    @property
    def paused(self) -> bool:
        changes = [step for step in self.steps if step in ("pause", "activate")]
        return bool(changes) and changes[-1] == "pause"

    def take(self, step: str) -> None:
        self.steps.append(step)
        if step == "pause":
            self.cluster.post(PAUSED)
        elif step == "activate":
            self.cluster.post(ACTIVATED)
        elif step == "ack":
            self.cluster.post(ack("1.1"))
        elif step == "decide":
            self.pending = self.cluster.cores["lifecycle"].decide(self.cluster.lifecycle)
        else:
            for append in self.pending:
                self.cluster.append(append, actor="service:lifecycle")
            self.pending = []
        self.cluster.settle("scheduler", "agent")


def worlds(depth: int) -> list[World]:
    """Every world reached by `depth` steps or fewer."""
    found, frontier = [World()], [World()]
    for _ in range(depth):
        frontier = [_after(world, step) for world in frontier for step in world.possible()]
        found += frontier
    return found


def _after(world: World, step: str) -> World:
    before, cluster = world.cluster, Cluster()
    cluster.states, cluster.log, cluster.versions = (
        dict(before.states),
        list(before.log),
        Counter(before.versions),
    )
    after = World(cluster, list(world.pending), list(world.steps))
    after.take(step)
    return after


def check_settled(world: World) -> None:
    """Once every decision is in the log: a paused experiment's run is asked
    to stop; an active one's runs on unless the trial acknowledged a stop; and
    the run's exit 0 means stopped (resumed when active) exactly when the
    trial acknowledged."""
    cluster, steps = world.cluster, world.steps
    cluster.settle()
    paused = world.paused
    acknowledged = "ack" in steps
    lifecycle_stop, scheduler_stop, agent_stop = asked_to_stop(cluster)
    if acknowledged:
        assert lifecycle_stop, steps
    elif paused:
        assert (lifecycle_stop, scheduler_stop, agent_stop) == (True, True, True), steps
    else:
        assert (lifecycle_stop, scheduler_stop, agent_stop) == (False, False, False), steps
    stops = [e.event_id for e in cluster.log if e.HasField("allocation_stop_requested")]
    for index, stored in enumerate(cluster.log):
        if stored.HasField("allocation_stop_withdrawn"):
            assert stored.allocation_stop_withdrawn.stop_event_id in stops[: index + 1], steps
    cluster.post(exited("1.1", 0))
    decided = cluster.settle()
    if not acknowledged:
        assert ended(decided) == [(1, TS.TRIAL_STATE_COMPLETED, "")], steps
    elif paused:
        assert decided == [], steps
    else:
        assert msg_ids(decided)[:1] == ["allocation-requested-1.2"], steps


def test_every_order_of_pauses_activations_acknowledgement_and_decisions() -> None:
    every = worlds(depth=10)
    assert len(every) > 600
    for world in every:
        check_settled(world)
