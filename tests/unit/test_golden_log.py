"""Recorded logs replay against today's cores.

- Every log, whatever the shapes it was written in, leaves nothing to decide once folded.
- Logs written in today's shapes are replayed step by step, as Temporal replays a
  workflow's history: each decision the log records must be one today's core makes from
  the events before it, with the same payload.
- One log, a recorded log with one decision changed by hand, must fail that replay.
"""

from typing import Any

import pytest
from support.golden_log import ReplayMismatch, golden_log, replay_decisions

from services.agent.core import AgentCore
from services.checkpoint.core import GcCore
from services.common.decider import Core
from services.scheduler.core import SchedulerCore
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore
from services.searcher.unmanaged import UnmanagedTrialsCore

ALL_LOGS = [
    "three_experiments.jsonl",
    "adaptive_pause_kill.jsonl",
    "pause_withdrawn.jsonl",
    "experiment_deleted_before_tensorboards.jsonl",
    "experiment_deleted.jsonl",
]
# Logs in today's shapes (AllocationRequested, TensorboardFilesDeleted, ...), replayed decision by decision.
TODAYS_LOGS = ["adaptive_pause_kill.jsonl", "pause_withdrawn.jsonl", "experiment_deleted.jsonl"]

# Each decider: its core, the actor its decisions are appended as, and their types.
DECIDERS: dict[str, tuple[Any, str, set[str]]] = {
    "searcher": (
        SearcherCore(),
        "service:searcher",
        {
            "trial_created",
            "trial_stop_requested",
            "trial_length_set",
            "experiment_progress_changed",
            "experiment_state_changed",
        },
    ),
    "lifecycle": (
        TrialLifecycleCore(),
        "service:searcher",
        {
            "allocation_requested",
            "allocation_stop_requested",
            "allocation_stop_withdrawn",
            "allocation_kill_requested",
            "trial_ended",
        },
    ),
    "scheduler": (SchedulerCore(), "service:scheduler", {"allocation_assigned", "allocation_canceled"}),
    "checkpoint": (
        GcCore(),
        "service:checkpoint",
        {"checkpoint_deletion_requested", "experiment_deleted", "experiment_delete_failed"},
    ),
}
CORES = [decider[0] for decider in DECIDERS.values()] + [AgentCore(agent_id="vm"), UnmanagedTrialsCore()]


@pytest.mark.parametrize("name", ALL_LOGS)
@pytest.mark.parametrize("core", CORES, ids=lambda core: type(core).__name__)
def test_a_settled_log_leaves_nothing_to_decide(core: Core[object], name: str) -> None:
    state = core.initial_state()
    for envelope in golden_log(name):
        assert envelope.WhichOneof("payload") is not None, envelope.event_id
        state = core.evolve(state, envelope)
    assert core.decide(state) == []


@pytest.mark.parametrize("name", TODAYS_LOGS)
@pytest.mark.parametrize("decider", list(DECIDERS))
def test_todays_cores_make_the_recorded_decisions_step_by_step(decider: str, name: str) -> None:
    core, actor, decided_types = DECIDERS[decider]
    replay_decisions(core, golden_log(name), actor, decided_types)


def test_a_log_with_a_changed_decision_fails_the_replay() -> None:
    core, actor, decided_types = DECIDERS["searcher"]
    with pytest.raises(ReplayMismatch, match="trial-stop-"):
        replay_decisions(core, golden_log("must_fail_changed_stop.jsonl"), actor, decided_types)


def test_an_experiment_deleted_before_tensorboard_files_were_is_folded_not_replayed() -> None:
    """Before TensorboardFilesDeleted, the checkpoint service answered ExperimentDeleted once the
    checkpoints were gone; today's waits for the TensorBoard files' outcome too. So that log is not
    in today's shapes: it folds to nothing left to decide (above), and a step-by-step replay says
    where today's core would differ."""
    core, actor, decided_types = DECIDERS["checkpoint"]
    with pytest.raises(ReplayMismatch, match="experiment-deleted-1"):
        replay_decisions(
            core, golden_log("experiment_deleted_before_tensorboards.jsonl"), actor, decided_types
        )


@pytest.mark.parametrize("name", ALL_LOGS)
def test_every_decision_of_a_service_names_its_cause(name: str) -> None:
    log = golden_log(name)
    known = {envelope.event_id for envelope in log}
    for envelope in log:
        if envelope.actor.startswith("service:") and envelope.WhichOneof("payload") != "agent_registered":
            assert envelope.causation_id in known, envelope.event_id
