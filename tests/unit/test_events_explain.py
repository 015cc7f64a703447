"""Why-chains (services/gateway/features/events/explain.py, explain_outcome.py):
the causation trees and outcomes of the golden logs' trials, experiments and
allocations, then hand-built logs for each rule of the tree and each outcome."""

import itertools

from google.protobuf.message import Message
from support.golden_log import golden_log

from determined.proto import api_pb2
from determined.proto import events_pb2 as ev
from services.common.envelope import Append, Envelope, aggregate, payload_field, wrap
from services.common.eventlog import StoredEvent
from services.gateway.features.events.explain import MAX_EXPLAINED, causation_tree, explanation
from services.gateway.features.events.explain_outcome import at, outcome

ES, TS = ev.ExperimentState, ev.TrialState
S = 10**9


def stored_log(name: str) -> list[StoredEvent]:
    return [StoredEvent(n, envelope, caught_up=False) for n, envelope in enumerate(golden_log(name), start=1)]


def trial_focus(log: list[StoredEvent], trial_id: int) -> set[str]:
    """A trial's aggregates, as scope.aggregates_of_trial finds them."""
    parts = {
        stored.envelope.aggregate
        for stored in log
        if stored.envelope.aggregate.startswith(f"allocation/{trial_id}.")
        or (
            stored.envelope.WhichOneof("payload") == "checkpoint_reported"
            and stored.envelope.checkpoint_reported.trial_id == trial_id
        )
    }
    return {f"trial/{trial_id}", f"metrics/{trial_id}", f"validation/{trial_id}", *parts}


def explained(
    log: list[StoredEvent], kind: str, key: str, focus: set[str], context: set[str]
) -> api_pb2.ExplainEventsResponse:
    read = [stored for stored in log if stored.envelope.aggregate in focus | context]
    return explanation(read, focus, kind, key)


def lines(answer: api_pb2.ExplainEventsResponse) -> list[tuple[int, int, str]]:
    """(depth, sequence, type) of each event of the chain."""
    return [(node.depth, node.event.sequence, node.event.type) for node in answer.chain]


# -- the golden logs ------------------------------------------------------------------


ASHA = stored_log("adaptive_pause_kill.jsonl")


def test_a_cut_trial_shows_its_run_the_validation_that_cut_it_and_its_stop() -> None:
    answer = explained(ASHA, "trial", "3", trial_focus(ASHA, 3), {"experiment/1"})
    assert lines(answer) == [
        # Created when trial 1 reached the top rung (trial 1 is not read: a root).
        (0, 54, "trial_created"),
        (1, 57, "allocation_requested"),
        # Assigned when trial 2's allocation freed its slot (not read: a root).
        (0, 64, "allocation_assigned"),
        (1, 66, "allocation_started"),
        (1, 89, "allocation_exited"),
        (2, 90, "trial_ended"),
        (0, 78, "trial_validation_reported"),
        (1, 79, "trial_stop_requested"),
        (2, 81, "allocation_stop_requested"),
        # Only the last batch of training metrics, and the checkpoint it ended with.
        (0, 86, "trial_metrics_reported"),
        (0, 87, "checkpoint_reported"),
    ]
    stop = answer.chain[7].event
    assert (stop.reason, stop.causation_sequence) == ("cut at rung 0 (4 batches)", 78)
    assert answer.chain[0].event.causation_sequence == 0  # its cause was not read
    assert answer.outcome == "stopped: cut at rung 0 (4 batches)"


def test_a_killed_trial_shows_who_killed_it() -> None:
    answer = explained(ASHA, "trial", "6", trial_focus(ASHA, 6), {"experiment/3"})
    assert lines(answer)[:7] == [
        (0, 149, "experiment_created"),
        (1, 150, "trial_created"),
        (2, 152, "allocation_requested"),
        (3, 153, "allocation_assigned"),
        (4, 156, "allocation_started"),
        (4, 170, "allocation_exited"),
        (5, 171, "trial_ended"),
    ]
    assert lines(answer)[-2:] == [(0, 168, "trial_kill_requested"), (1, 169, "allocation_kill_requested")]
    assert answer.chain[-2].event.actor == "user:determined"
    assert answer.outcome == "killed by determined"


def test_a_paused_and_resumed_trial_shows_the_pause_and_the_activation_from_the_experiment() -> None:
    answer = explained(ASHA, "trial", "5", trial_focus(ASHA, 5), {"experiment/2"})
    chain = lines(answer)
    assert (0, 123, "experiment_state_changed") in chain  # the pause, a user's command
    pause = chain.index((0, 123, "experiment_state_changed"))
    assert chain[pause + 1] == (1, 124, "allocation_stop_requested")
    activation = chain.index((0, 129, "experiment_state_changed"))
    assert chain[activation + 1 : activation + 7] == [
        (1, 130, "allocation_requested"),
        (2, 131, "allocation_assigned"),
        (3, 132, "allocation_started"),
        (3, 145, "allocation_exited"),
        (4, 146, "trial_ended"),
        # The experiment's end answers the trial's: it is shown; its progress is not.
        (5, 148, "experiment_state_changed"),
    ]
    assert not [line for line in chain if line[2] == "experiment_progress_changed"]
    # One batch of metrics per run: the last.
    assert [line[1] for line in chain if line[2] == "trial_metrics_reported"] == [126, 143]
    assert answer.outcome == "completed: its code finished"


def test_an_allocation_shows_the_chain_that_led_to_it_and_what_answered_it() -> None:
    context = trial_focus(ASHA, 5) | {"experiment/2"}
    answer = explained(ASHA, "allocation", "5.2", {"allocation/5.2"}, context)
    assert lines(answer) == [
        (0, 129, "experiment_state_changed"),
        (1, 130, "allocation_requested"),
        (2, 131, "allocation_assigned"),
        (3, 132, "allocation_started"),
        (3, 145, "allocation_exited"),
        (4, 146, "trial_ended"),
    ]
    assert answer.outcome == "exited 0"
    first = explained(ASHA, "allocation", "5.1", {"allocation/5.1"}, context)
    assert [line[2] for line in lines(first)][:2] == ["experiment_created", "trial_created"]
    assert first.outcome == "stopped: experiment paused"


def test_an_experiment_shows_every_trial_and_how_it_ended() -> None:
    focus = {"experiment/3"} | trial_focus(ASHA, 6) | trial_focus(ASHA, 7)
    answer = explained(ASHA, "experiment", "3", focus, set())
    chain = lines(answer)
    assert chain[:3] == [(0, 149, "experiment_created"), (1, 150, "trial_created"), (2, 151, "trial_created")]
    # (Recorded before each decision answered the event folded: trial 7's creation answers trial 6's.)
    ending = chain.index((6, 189, "trial_ended"))
    assert chain[ending + 1] == (7, 191, "experiment_state_changed")  # its progress left out
    assert (0, 168, "trial_kill_requested") in chain
    assert answer.outcome == "completed: the search is done"


def test_logs_written_before_tasks_explain_through_the_upcast() -> None:
    old = stored_log("three_experiments.jsonl")
    failed = explained(old, "trial", "2", trial_focus(old, 2), {"experiment/2"})
    assert [line[2] for line in lines(failed)] == [
        "experiment_created",
        "trial_created",
        "allocation_assigned",
        "allocation_started",
        "allocation_exited",
        "allocation_assigned",
        "allocation_started",
        "allocation_exited",
        "trial_ended",
        "experiment_state_changed",
    ]
    assert failed.outcome.startswith("failed: ")
    killed = explained(old, "experiment", "3", {"experiment/3", *trial_focus(old, 3)}, set())
    assert killed.outcome == "canceled: killed by determined"
    assert explained(old, "allocation", "2.1", {"allocation/2.1"}, set()).outcome == "failed with exit code 3"


def test_every_trial_of_a_generated_log_explains_each_of_its_events_once() -> None:
    log = stored_log("generated_cluster.jsonl.gz")
    by_aggregate: dict[str, list[StoredEvent]] = {}
    for stored in log:
        by_aggregate.setdefault(stored.envelope.aggregate, []).append(stored)
    created = [s.envelope.trial_created for s in log if s.envelope.WhichOneof("payload") == "trial_created"]
    for trial in created:
        focus = {f"{kind}/{trial.trial_id}" for kind in ("trial", "metrics", "validation")}
        focus |= {name for name in by_aggregate if name.startswith(f"allocation/{trial.trial_id}.")}
        read = sorted(
            (s for name in focus | {f"experiment/{trial.experiment_id}"} for s in by_aggregate.get(name, [])),
            key=lambda stored: stored.sequence,
        )
        answer = explanation(read, focus, "trial", str(trial.trial_id))
        sequences = [node.event.sequence for node in answer.chain]
        assert len(sequences) == len(set(sequences)), trial.trial_id
        assert answer.outcome, trial.trial_id
        depths = [node.depth for node in answer.chain]
        assert depths[0] == 0 and all(b <= a + 1 for a, b in itertools.pairwise(depths)), trial.trial_id


# -- hand-built logs: the tree ----------------------------------------------------------


class Log:
    """Events appended one by one, each answering the event named (by its id)."""

    def __init__(self) -> None:
        self.events: list[StoredEvent] = []

    def add(
        self,
        payload: Message,
        aggregate_name: str,
        cause: str = "",
        actor: str = "service:x",
        at_s: float = 0,
    ) -> str:
        event_id = f"e{len(self.events) + 1}"
        append = Append(aggregate_name, payload, event_id, causation_id=cause)
        envelope = wrap(append, actor=actor, occurred_at_ns=int(at_s * S))
        self.events.append(StoredEvent(len(self.events) + 1, envelope, caught_up=False))
        return event_id

    def unreadable(self, why: str) -> None:
        self.events.append(StoredEvent(len(self.events) + 1, Envelope(), caught_up=False, skipped=why))


def tree(log: Log, focus: set[str]) -> list[tuple[int, int]]:
    return [(node.depth, node.stored.sequence) for node in causation_tree(log.events, focus)]


def test_children_hang_from_their_cause_in_log_order_and_a_cause_not_read_makes_a_root() -> None:
    log = Log()
    created = log.add(ev.TrialCreated(trial_id=1), "trial/1", cause="not-read")
    first = log.add(ev.TrialLengthSet(trial_id=1), "trial/1", cause=created)
    log.add(ev.TrialStopRequested(trial_id=1), "trial/1", cause=first)
    log.add(ev.TrialLengthSet(trial_id=1), "trial/1", cause=created)
    log.add(ev.TrialKillRequested(trial_id=1), "trial/1", actor="user:alice")
    assert tree(log, {"trial/1"}) == [(0, 1), (1, 2), (2, 3), (1, 4), (0, 5)]
    nodes = causation_tree(log.events, {"trial/1"})
    assert [node.cause_sequence for node in nodes] == [0, 1, 2, 1, 0]


def test_context_shows_what_leads_to_the_focus_and_what_answers_it_directly() -> None:
    log = Log()
    created = log.add(ev.ExperimentCreated(experiment_id=1), "experiment/1", actor="user:alice")
    log.add(ev.ExperimentStateChanged(experiment_id=1), "experiment/1", actor="user:alice")  # leads nowhere
    trial = log.add(ev.TrialCreated(trial_id=1), "trial/1", cause=created)
    ended = log.add(ev.TrialEnded(trial_id=1), "trial/1", cause=trial)
    answer = log.add(ev.ExperimentStateChanged(experiment_id=1), "experiment/1", cause=ended)
    log.add(ev.ExperimentStateChanged(experiment_id=1), "experiment/1", cause=answer)  # answers the context
    assert tree(log, {"trial/1"}) == [(0, 1), (1, 3), (2, 4), (3, 5)]


def test_progress_and_all_but_the_last_metrics_of_a_run_are_passed_through() -> None:
    log = Log()
    ended = log.add(ev.TrialEnded(trial_id=1), "trial/1")
    progress = log.add(ev.ExperimentProgressChanged(experiment_id=1), "experiment/1", cause=ended)
    log.add(ev.ExperimentStateChanged(experiment_id=1), "experiment/1", cause=progress)
    for run in (1, 1, 2, 2):
        log.add(ev.TrialMetricsReported(trial_id=1, trial_run_id=run), "metrics/1", actor="trial:1")
    log.add(ev.TrialValidationReported(trial_id=1), "validation/1", actor="trial:1")
    focus = {"trial/1", "metrics/1", "validation/1", "experiment/1"}
    assert tree(log, focus) == [(0, 1), (1, 3), (0, 5), (0, 7), (0, 8)]


def test_unreadable_events_are_roots_and_causes_that_loop_end() -> None:
    log = Log()
    log.unreadable("not protobuf")
    looped = ev.TrialLengthSet(trial_id=1)
    first = log.add(looped, "trial/1", cause="e3")
    log.add(looped, "trial/1", cause=first)
    log.add(ev.TrialStopRequested(trial_id=1), "trial/1", cause="e3")
    # e2 and e3 answer each other: both roots; e4 answers e3.
    assert tree(log, {"trial/1"}) == [(0, 1), (0, 2), (0, 3), (1, 4)]
    answer = explanation(log.events, {"trial/1"}, "trial", "1")
    assert answer.chain[0].event.summary == "unreadable event: not protobuf"


def test_an_explanation_shows_at_most_max_explained_events() -> None:
    log = Log()
    for _ in range(MAX_EXPLAINED + 2):
        log.add(ev.TrialLengthSet(trial_id=1), "trial/1")
    answer = explanation(log.events, {"trial/1"}, "trial", "1")
    assert len(answer.chain) == MAX_EXPLAINED
    assert answer.outcome.endswith(f"(the first {MAX_EXPLAINED} of {MAX_EXPLAINED + 2} events shown)")


# -- hand-built logs: the outcome -------------------------------------------------------


def events(*payloads: Message | tuple[Message, str], at_s: float = 0) -> list[StoredEvent]:
    """Stored events of `payloads` (a payload, or (payload, actor))."""
    log = Log()
    for item in payloads:
        payload, actor = item if isinstance(item, tuple) else (item, "service:x")
        log.add(payload, aggregate("x", payload_field(payload)), actor=actor, at_s=at_s)
    return log.events


def requested(allocation_id: str) -> ev.AllocationRequested:
    trial_id, _, run = allocation_id.partition(".")
    return ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=trial_id,
        trial=ev.TrialLaunch(trial_id=int(trial_id), trial_run_id=int(run)),
    )


def assigned(allocation_id: str, *agents: str) -> ev.AllocationAssigned:
    return ev.AllocationAssigned(
        allocation_id=allocation_id, placements=[ev.Placement(agent_id=a, slot_ids=[0]) for a in agents]
    )


def test_a_live_trial_says_where_its_newest_run_is() -> None:
    started = ev.AllocationStarted(allocation_id="7.2", agent_id="agent-2")
    when = at(60 * S)
    assert when == "1970-01-01 00:01:00 UTC"
    run_2 = [requested("7.1"), ev.AllocationExited(allocation_id="7.1", agent_lost=True), requested("7.2")]
    assert outcome("trial", "7", events(*run_2, at_s=60)) == f"waiting for slots: run 2 asked for at {when}"
    assigned_2 = [*run_2, assigned("7.2", "agent-2", "agent-3")]
    assert outcome("trial", "7", events(*assigned_2, at_s=60)) == (
        f"starting: run 2 assigned to agent-2, agent-3 at {when}"
    )
    assert outcome("trial", "7", events(*assigned_2, started, at_s=60)) == (
        f"running: run 2 on agent-2, agent-3 since {when}"
    )
    stopping = [
        *assigned_2,
        started,
        ev.AllocationStopRequested(allocation_id="7.2", reason="experiment paused"),
    ]
    assert outcome("trial", "7", events(*stopping, at_s=60)) == (
        f"stopping (experiment paused): run 2 on agent-2, agent-3 since {when}"
    )
    between = [
        *stopping,
        ev.AllocationStopAcknowledged(allocation_id="7.2"),
        ev.AllocationExited(allocation_id="7.2"),
    ]
    assert outcome("trial", "7", events(*between)) == "between runs: run 2 stopped: experiment paused"
    assert outcome("trial", "7", events(ev.TrialCreated(trial_id=7))) == "waiting: no run asked for yet"


def test_an_ended_trial_says_how() -> None:
    def ended(state: int, reason: str = "") -> ev.TrialEnded:
        return ev.TrialEnded(trial_id=7, experiment_id=1, state=state, reason=reason)

    cut = ev.TrialStopRequested(
        trial_id=7, reason="cut at rung 0 (58 batches): loss 0.81 not in the top 1/4 of 8"
    )
    assert (
        outcome("trial", "7", events(cut, ended(TS.TRIAL_STATE_COMPLETED, cut.reason)))
        == f"stopped: {cut.reason}"
    )
    assert outcome("trial", "7", events(ended(TS.TRIAL_STATE_COMPLETED))) == "completed: its code finished"
    kill = (ev.TrialKillRequested(trial_id=7), "user:alice")
    assert (
        outcome("trial", "7", events(kill, ended(TS.TRIAL_STATE_CANCELED, "killed by a user")))
        == "killed by alice"
    )
    experiment_kill = (ev.ExperimentKillRequested(experiment_id=1), "user:bob")
    assert outcome("trial", "7", events(experiment_kill, ended(TS.TRIAL_STATE_CANCELED))) == (
        "killed by bob (its experiment)"
    )
    assert outcome("trial", "7", events(ended(TS.TRIAL_STATE_CANCELED))) == "canceled: killed"
    assert outcome("trial", "7", events(ended(TS.TRIAL_STATE_ERROR, "exit 3"))) == "failed: exit 3"


def test_an_experiment_says_its_state_and_who_made_it() -> None:
    def changed(state: int, reason: str = "") -> ev.ExperimentStateChanged:
        return ev.ExperimentStateChanged(experiment_id=1, state=state, reason=reason)

    trials = [ev.TrialCreated(trial_id=1), ev.TrialCreated(trial_id=2), ev.TrialEnded(trial_id=1)]
    assert outcome("experiment", "1", events(*trials)) == "active: 1 of 2 trials ended"
    paused = (changed(ES.EXPERIMENT_STATE_PAUSED), "user:alice")
    assert outcome("experiment", "1", events(*trials, paused)) == "paused by alice: 1 of 2 trials ended"
    created_paused = (ev.ExperimentCreated(experiment_id=1, activate=False), "user:bob")
    assert outcome("experiment", "1", events(created_paused)) == "paused by bob: 0 of 0 trials ended"
    kill = (ev.ExperimentKillRequested(experiment_id=1), "user:alice")
    assert outcome("experiment", "1", events(kill, changed(ES.EXPERIMENT_STATE_CANCELED))) == (
        "canceled: killed by alice"
    )
    assert outcome("experiment", "1", events(changed(ES.EXPERIMENT_STATE_ERROR, "every trial failed"))) == (
        "error: every trial failed"
    )
    assert outcome("experiment", "1", events(ev.ExperimentDeleted(experiment_id=1))) == "deleted"


def test_an_allocation_says_how_it_ended() -> None:
    def ended(*payloads: Message) -> str:
        return outcome("allocation", "7.1", events(requested("7.1"), *payloads))

    assert ended(
        ev.AllocationCanceled(allocation_id="7.1", reason="stopped before it was assigned slots")
    ) == ("canceled before it got slots: stopped before it was assigned slots")
    lost = ev.AllocationExited(allocation_id="7.1", agent_lost=True, error="agent vm lost: no heartbeat")
    assert ended(lost) == "ended with its agent lost: agent vm lost: no heartbeat"
    kill = ev.AllocationKillRequested(allocation_id="7.1", reason="killed by a user")
    assert ended(kill, ev.AllocationExited(allocation_id="7.1", killed=True)) == "killed (killed by a user)"
    stop = ev.AllocationStopRequested(allocation_id="7.1", reason="preempted")
    assert ended(stop, ev.AllocationExited(allocation_id="7.1", killed=True)) == (
        "killed (past its stop's grace period: preempted)"
    )
    assert ended(ev.AllocationExited(allocation_id="7.1", exit_code=3, error="boom")) == (
        "failed with exit code 3: boom"
    )
    assert outcome("allocation", "9.1", events(requested("7.1"))) == "not requested within the log"
