"""Cancel and continue (det experiment cancel / continue) in the searcher's two
pure cores, the search and the trial lifecycle, driven together on one log the
way they meet in the searcher's process; the scheduler's and the agent's part
(assignment, the run's exit) is given by the test."""

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from determined.proto import events_pb2 as ev
from services.common.decider import Core
from services.common.envelope import Append, Envelope, payload_field, wrap
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import CANCELED, TrialLifecycleCore

ES, TS = ev.ExperimentState, ev.TrialState
_ids = itertools.count()


def config(name: str = "single", **searcher: Any) -> dict[str, Any]:
    return {
        "searcher": {"name": name, "metric": "loss", "max_length": {"batches": 100}, **searcher},
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "const", "val": 0.1}},
        "reproducibility": {"experiment_seed": 7},
        "max_restarts": 1,
    }


def created(experiment_id: int = 1, activate: bool = True, **searcher: Any) -> ev.ExperimentCreated:
    return ev.ExperimentCreated(
        experiment_id=experiment_id,
        owner="alice",
        context_hash="ctx",
        config_json=json.dumps(config(**searcher)),
        activate=activate,
    )


def continued(experiment_id: int = 1, **searcher: Any) -> ev.ExperimentContinued:
    return ev.ExperimentContinued(experiment_id=experiment_id, config_json=json.dumps(config(**searcher)))


def cancel(experiment_id: int = 1) -> ev.ExperimentCancelRequested:
    return ev.ExperimentCancelRequested(experiment_id=experiment_id)


def exited(allocation_id: str, code: int = 0) -> ev.AllocationExited:
    trial_id = int(allocation_id.split(".")[0])
    return ev.AllocationExited(
        allocation_id=allocation_id, trial_id=trial_id, agent_id="a", exit_code=code, task_id=str(trial_id)
    )


def ack(allocation_id: str) -> ev.AllocationStopAcknowledged:
    return ev.AllocationStopAcknowledged(allocation_id=allocation_id, task_id=allocation_id.split(".")[0])


def checkpoint(trial_id: int, uuid: str, steps: int) -> ev.CheckpointReported:
    return ev.CheckpointReported(uuid=uuid, trial_id=trial_id, experiment_id=1, steps_completed=steps)


@dataclass
class Searcher:
    """Both cores and the log they read: `given` appends what others append,
    `settle` what the cores decide, until they decide nothing more."""

    cores: tuple[Core[Any], ...] = (SearcherCore(), TrialLifecycleCore())
    states: list[Any] = field(default_factory=list)
    log: list[Envelope] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.states = [core.initial_state() for core in self.cores]

    def given(self, *payloads: Message) -> "Searcher":
        for payload in payloads:
            self._fold(wrap(Append("x/1", payload, f"given-{next(_ids)}"), actor="test", occurred_at_ns=0))
        return self

    def settle(self) -> list[Append]:
        decided: list[Append] = []
        for _ in range(50):
            appends = [
                a for core, state in zip(self.cores, self.states, strict=True) for a in core.decide(state)
            ]
            if not appends:
                return decided
            decided += appends
            for append in appends:
                self._fold(wrap(append, actor="searcher", occurred_at_ns=0))
        raise AssertionError("the cores did not settle")

    def _fold(self, envelope: Envelope) -> None:
        self.log.append(envelope)
        kind = envelope.WhichOneof("payload")
        self.states = [
            core.evolve(state, envelope) if kind in core.folds else state
            for core, state in zip(self.cores, self.states, strict=True)
        ]


def outcome(appends: list[Append]) -> list[tuple[str, str]]:
    """(event type, message id) of each decision, progress left out."""
    return [
        (payload_field(a.payload), a.msg_id)
        for a in appends
        if not isinstance(a.payload, ev.ExperimentProgressChanged)
    ]


def running(searcher: Searcher, **searcher_config: Any) -> Searcher:
    """Experiment 1 created active; its first trial's run 1.1 requested (and, as
    far as the cores care, running)."""
    searcher.given(created(**searcher_config))
    assert ("allocation_requested", "allocation-requested-1.1") in outcome(searcher.settle())
    return searcher


def ending(appends: list[Append]) -> tuple[int, str]:
    [end] = [a.payload for a in appends if isinstance(a.payload, ev.ExperimentStateChanged)]
    return end.state, end.reason


# -- cancel ---------------------------------------------------------------------------


def test_cancel_stops_the_running_trial_gracefully_then_ends_canceled() -> None:
    searcher = running(Searcher())
    [stop] = searcher.given(cancel()).settle()
    assert isinstance(stop.payload, ev.AllocationStopRequested)
    assert (stop.payload.allocation_id, stop.payload.reason) == ("1.1", CANCELED)
    appends = searcher.given(ack("1.1"), exited("1.1")).settle()
    [trial_end] = [a.payload for a in appends if isinstance(a.payload, ev.TrialEnded)]
    assert (trial_end.state, trial_end.reason) == (TS.TRIAL_STATE_CANCELED, CANCELED)
    assert ending(appends) == (ES.EXPERIMENT_STATE_CANCELED, "canceled by user")
    # Its trial stopped unfinished: no new run, and the search's progress is not 100%.
    assert not any(
        isinstance(a.payload, ev.AllocationRequested | ev.ExperimentProgressChanged) for a in appends
    )


def test_a_canceled_paused_experiment_ends_at_once() -> None:
    searcher = Searcher().given(created(activate=False))
    appends = searcher.given(cancel()).settle()
    assert outcome(appends) == [("experiment_state_changed", "experiment-ended-1")]
    assert ending(appends) == (ES.EXPERIMENT_STATE_CANCELED, "canceled by user")


def test_the_stopped_trial_of_a_paused_experiment_is_canceled_at_once() -> None:
    searcher = running(Searcher())
    searcher.given(ev.ExperimentStateChanged(experiment_id=1, state=ES.EXPERIMENT_STATE_PAUSED))
    appends = searcher.settle()
    assert outcome(appends) == [("allocation_stop_requested", "allocation-stop-1.1")]
    searcher.given(ack("1.1"), exited("1.1"))
    assert searcher.settle() == []  # paused: it waits
    appends = searcher.given(cancel()).settle()
    assert [t for t, _ in outcome(appends)] == ["trial_ended", "experiment_state_changed"]


def test_cancel_creates_no_more_trials() -> None:
    searcher = running(Searcher(), name="random", max_trials=3, max_concurrent_trials=1)
    searcher.given(cancel()).settle()
    appends = searcher.given(ack("1.1"), exited("1.1")).settle()
    assert not any(isinstance(a.payload, ev.TrialCreated) for a in appends)
    assert ending(appends)[0] == ES.EXPERIMENT_STATE_CANCELED


def test_a_kill_after_a_cancel_kills_the_run() -> None:
    searcher = running(Searcher())
    searcher.given(cancel()).settle()
    [kill] = searcher.given(ev.ExperimentKillRequested(experiment_id=1)).settle()
    assert isinstance(kill.payload, ev.AllocationKillRequested)
    appends = searcher.given(ev.AllocationExited(allocation_id="1.1", exit_code=137, killed=True)).settle()
    assert ending(appends) == (ES.EXPERIMENT_STATE_CANCELED, "killed by user")


def test_a_run_that_finishes_before_it_stops_completes_its_trial() -> None:
    searcher = running(Searcher())
    searcher.given(cancel()).settle()
    appends = searcher.given(exited("1.1")).settle()
    [trial_end] = [a.payload for a in appends if isinstance(a.payload, ev.TrialEnded)]
    assert trial_end.state == TS.TRIAL_STATE_COMPLETED
    assert ending(appends)[0] == ES.EXPERIMENT_STATE_CANCELED


# -- continue -------------------------------------------------------------------------


def completed(searcher: Searcher) -> Searcher:
    """Experiment 1's trial checkpointed at 100 batches and completed."""
    searcher = running(searcher)
    appends = searcher.given(checkpoint(1, "c0ffee00-1", 100), exited("1.1")).settle()
    assert ending(appends)[0] == ES.EXPERIMENT_STATE_COMPLETED
    return searcher


def test_continue_reopens_the_trial_from_its_latest_checkpoint_under_the_new_config() -> None:
    searcher = completed(Searcher())
    appends = searcher.given(continued(max_length={"batches": 300})).settle()
    assert outcome(appends) == [
        ("trial_reopened", "trial-reopened-1-1"),
        ("allocation_requested", "allocation-requested-1.2"),
    ]
    reopened, requested = (a.payload for a in appends)
    assert (reopened.trial_id, reopened.experiment_id) == (1, 1)
    launch = requested.trial
    assert (launch.trial_run_id, launch.latest_checkpoint, launch.steps_completed) == (2, "c0ffee00-1", 100)
    assert json.loads(launch.config_json)["searcher"]["max_length"] == {"batches": 300}
    assert (launch.context_hash, launch.owner) == ("ctx", "alice")
    assert requested.reason == (
        "trial 1 run 2: experiment continued by a user, from checkpoint c0ffee00 at 100 batches"
    )
    appends = searcher.given(exited("1.2")).settle()
    assert outcome(appends) == [
        ("trial_ended", "trial-ended-1-1"),
        ("experiment_state_changed", "experiment-ended-1-1"),
    ]
    assert ending(appends) == (ES.EXPERIMENT_STATE_COMPLETED, "the search is done")
    progress = [a.msg_id for a in appends if isinstance(a.payload, ev.ExperimentProgressChanged)]
    assert progress == ["experiment-progress-1-100-1"]


def test_each_continue_has_message_ids_of_its_own() -> None:
    searcher = completed(Searcher())
    searcher.given(continued()).settle()
    searcher.given(exited("1.2")).settle()
    appends = searcher.given(continued()).settle()
    assert outcome(appends) == [
        ("trial_reopened", "trial-reopened-1-2"),
        ("allocation_requested", "allocation-requested-1.3"),
    ]
    assert outcome(searcher.given(exited("1.3")).settle()) == [
        ("trial_ended", "trial-ended-1-2"),
        ("experiment_state_changed", "experiment-ended-1-2"),
    ]


def test_a_continued_trial_has_its_restarts_again() -> None:
    searcher = running(Searcher())  # max_restarts 1
    searcher.given(exited("1.1", 1)).settle()
    appends = searcher.given(exited("1.2", 1)).settle()
    assert ending(appends)[0] == ES.EXPERIMENT_STATE_ERROR
    searcher.given(continued()).settle()
    appends = searcher.given(exited("1.3", 1)).settle()
    assert outcome(appends) == [("allocation_requested", "allocation-requested-1.4")]
    assert appends[0].payload.reason.startswith("trial 1 run 4: restart 1 of 1")


def test_a_continued_experiment_can_be_canceled() -> None:
    searcher = completed(Searcher())
    searcher.given(continued()).settle()
    searcher.given(cancel()).settle()
    appends = searcher.given(ack("1.2"), exited("1.2")).settle()
    assert outcome(appends) == [
        ("trial_ended", "trial-ended-1-1"),
        ("experiment_state_changed", "experiment-ended-1-1"),
    ]
    assert ending(appends)[0] == ES.EXPERIMENT_STATE_CANCELED


def test_continuing_an_experiment_that_never_had_a_trial_creates_it() -> None:
    searcher = Searcher().given(created(activate=False), ev.ExperimentKillRequested(experiment_id=1))
    assert ending(searcher.settle())[0] == ES.EXPERIMENT_STATE_CANCELED
    appends = searcher.given(continued()).settle()
    assert outcome(appends) == [
        ("trial_created", "trial-created-1-0-1"),
        ("allocation_requested", "allocation-requested-1.1"),
    ]


def test_a_continue_of_a_search_that_is_not_single_or_not_ended_is_ignored() -> None:
    searcher = running(Searcher(), name="random", max_trials=1)
    searcher.given(checkpoint(1, "c1", 100), exited("1.1")).settle()
    assert searcher.given(continued(name="random", max_trials=1)).settle() == []
    live = running(Searcher())
    assert live.given(continued()).settle() == []


def test_a_continued_config_that_is_not_single_ends_the_experiment_in_error() -> None:
    searcher = completed(Searcher())
    appends = searcher.given(continued(name="random", max_trials=2)).settle()
    assert outcome(appends) == [("experiment_state_changed", "experiment-ended-1-1")]
    assert ending(appends) == (
        ES.EXPERIMENT_STATE_ERROR,
        "only a single-searcher experiment can be continued",
    )


def test_replaying_a_canceled_and_continued_history_decides_nothing_again() -> None:
    searcher = completed(Searcher())
    searcher.given(continued()).settle()
    searcher.given(cancel()).settle()
    searcher.given(ack("1.2"), exited("1.2")).settle()
    replayed = Searcher()
    for envelope in searcher.log:
        replayed._fold(envelope)
    assert replayed.settle() == []
    assert replayed.states == searcher.states
