"""A warm start from another trial (searcher.source_trial_id): the gateway resolves the
source trial's latest checkpoint when the experiment is created and records it in
ExperimentCreated; the searcher's lifecycle hands it to each trial's first run as the
checkpoint it starts from, and the checkpoint service keeps it from GC."""

import json

import pytest
from test_checkpoint_core import created, ended, policy, trained
from test_lifecycle_core import experiment, given, settle, trial

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.experiments.warm_start import latest_usable, source_trial_id


def test_the_first_run_starts_from_the_source_trials_checkpoint_recorded_at_creation() -> None:
    created_event = experiment(searcher={"source_trial_id": 7})
    created_event.source_trial_checkpoint_uuid = "src-latest"
    state, [append] = settle(given(created_event, trial(1)))
    launch = append.payload.trial
    assert (launch.latest_checkpoint, launch.steps_completed) == ("src-latest", 0)


def test_a_source_checkpoint_uuid_still_applies_without_a_source_trial() -> None:
    state, [append] = settle(given(experiment(searcher={"source_checkpoint_uuid": "warm"}), trial(1)))
    assert append.payload.trial.latest_checkpoint == "warm"


def test_gc_keeps_the_checkpoint_recorded_at_creation() -> None:
    """Trial 1's latest checkpoint is c now; the experiment recorded b when it was created."""
    source = created(2, source_trial_id=1)
    source.source_trial_checkpoint_uuid = "b"
    gc = trained().given(source, ended(), policy(0, 0, 0))
    assert set().union(*(d.uuids for d in gc.deletions())) == {"a", "c", "d", "e"}


def checkpoint(uuid: str, steps: int, at: int, state: str = "COMPLETED") -> api_pb2.Checkpoint:
    return api_pb2.Checkpoint(uuid=uuid, steps_completed=steps, reported_at_ns=at, state=state)


def test_the_latest_usable_checkpoint_of_the_source_trial() -> None:
    found = [
        checkpoint("a", 100, 1),
        checkpoint("b", 200, 2),
        checkpoint("c", 200, 3),
        checkpoint("d", 300, 4, "DELETED"),
        checkpoint("e", 400, 5, "DELETING"),
    ]
    assert latest_usable(3, found) == "c"
    assert latest_usable(3, [*found, checkpoint("f", 500, 6, "PARTIALLY_DELETED")]) == "f"


def test_a_source_trial_without_a_checkpoint_is_refused() -> None:
    with pytest.raises(
        InvalidArgumentError, match="source_trial_id: trial 3 has no checkpoint to start from"
    ):
        latest_usable(3, [checkpoint("d", 300, 4, "DELETED")])


@pytest.mark.parametrize(
    ("searcher", "expected"),
    [({"name": "single"}, None), ({"source_trial_id": None}, None), ({"source_trial_id": 12}, 12)],
)
def test_the_source_trial_a_config_names(searcher: dict[str, object], expected: int | None) -> None:
    assert source_trial_id(json.dumps({"searcher": searcher})) == expected
