"""Row building for checkpoint deletion, experiment deletion, GC policies and
the model registry: absolute rules, so a replayed or repeated event leaves
the rows it left once."""

import json
from typing import Any

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.gateway import projection
from services.gateway.features.checkpoints.projection import checkpoint_row
from services.gateway.features.experiments.projection import experiment_row

Row = dict[str, Any]


def envelope(payload: object, msg_id: str = "m", at: int = 100) -> ev.Envelope:
    return wrap(Append("x/1", payload, msg_id), actor="service:test", occurred_at_ns=at)  # type: ignore[arg-type]


def fold(table: str, row: Row | None, *events: ev.Envelope) -> Row | None:
    """The row after the events (None: still none), folded in one batch."""
    plan = projection.plan_batch(list(events))
    stored = {} if row is None else {row[projection.key_column(table)]: row}
    written = plan.rows({table: stored})[table]
    return written[0] if written else row


def checkpoint(**changes: Any) -> Row:
    report = ev.CheckpointReported(
        uuid="c", trial_id=1, experiment_id=1, steps_completed=5, resources={"a": 1, "b": 2}
    )
    return {**checkpoint_row(report, 1), **changes}


def experiment(**changes: Any) -> Row:
    created = ev.ExperimentCreated(
        experiment_id=1, name="e", owner="o", config_json='{"checkpoint_storage": {}}'
    )
    return {**experiment_row(created, 1), **changes}


def requested(deletion_id: int) -> ev.Envelope:
    return envelope(ev.CheckpointDeletionRequested(experiment_id=1, deletion_id=deletion_id, uuids=["c"]))


def partially(deletion_id: int, error: str = "denied") -> ev.Envelope:
    return envelope(
        ev.CheckpointPartiallyDeleted(
            uuid="c", experiment_id=1, deletion_id=deletion_id, remaining={"b": 2}, error=error
        )
    )


def test_a_deletion_moves_a_checkpoint_to_deleting_then_to_its_outcome() -> None:
    deleting = fold("checkpoints", checkpoint(), requested(1))
    assert deleting is not None and (deleting["state"], deleting["deletion_id"]) == ("DELETING", 1)
    left = fold("checkpoints", deleting, partially(1))
    assert left is not None
    assert (left["state"], json.loads(left["resources"]), left["delete_error"]) == (
        "PARTIALLY_DELETED",
        {"b": 2},
        "denied",
    )
    again = fold("checkpoints", left, requested(2), envelope(ev.CheckpointDeleted(uuid="c", deletion_id=2)))
    assert again is not None and (again["state"], again["resources"], again["delete_error"]) == (
        "DELETED",
        "{}",
        "",
    )


def test_an_older_deletion_or_a_repeated_report_changes_nothing_newer() -> None:
    deleted = checkpoint(state="DELETED", resources="{}", deletion_id=2)
    assert fold("checkpoints", deleted, requested(1), partially(1), requested(2), requested(3)) == deleted
    report = ev.CheckpointReported(
        uuid="c", trial_id=1, experiment_id=1, steps_completed=5, resources={"a": 1}
    )
    assert fold("checkpoints", deleted, envelope(report)) == deleted
    assert fold("checkpoints", None, requested(1)) is None  # no checkpoint, no row


def test_a_repeated_report_of_a_kept_checkpoint_replaces_it_but_its_state() -> None:
    report = ev.CheckpointReported(
        uuid="c", trial_id=1, experiment_id=1, steps_completed=5, metadata_json='{"x": 1}'
    )
    row = fold("checkpoints", checkpoint(state="COMPLETED"), envelope(report))
    assert row is not None and (row["metadata_json"], row["state"]) == ('{"x": 1}', "COMPLETED")


def test_a_gc_policy_shows_in_the_stored_config() -> None:
    changed = ev.CheckpointGcPolicyChanged(experiment_id=1, save_experiment_best=2, save_trial_best=0)
    row = fold("experiments", experiment(), envelope(changed))
    assert row is not None
    assert json.loads(row["config_json"])["checkpoint_storage"] == {
        "save_experiment_best": 2,
        "save_trial_best": 0,
        "save_trial_latest": 0,
    }


def test_an_experiment_deletion_counts_each_request_once() -> None:
    first = envelope(ev.ExperimentDeleteRequested(experiment_id=1), "experiment-delete-1-1")
    failed = envelope(ev.ExperimentDeleteFailed(experiment_id=1, reason="files are left"))
    second = envelope(ev.ExperimentDeleteRequested(experiment_id=1), "experiment-delete-1-2")
    row = fold("experiments", experiment(state="COMPLETED"), first, first, failed)
    assert row is not None and (row["state"], json.loads(row["delete_requests"]), row["delete_error"]) == (
        "DELETE_FAILED",
        ["experiment-delete-1-1"],
        "files are left",
    )
    row = fold("experiments", row, second, envelope(ev.ExperimentDeleted(experiment_id=1)), first)
    assert row is not None and (row["state"], len(json.loads(row["delete_requests"]))) == ("DELETED", 2)
    running = fold("experiments", experiment(state="ACTIVE"), first)
    assert (
        running is not None and running["state"] == "ACTIVE"
    )  # never asked of a running one: no state change


def test_a_kill_never_undoes_a_deletion() -> None:
    deleting = experiment(state="DELETING")
    assert fold("experiments", deleting, envelope(ev.ExperimentKillRequested(experiment_id=1))) == deleting


def test_models_and_versions_keep_their_first_creation() -> None:
    created = envelope(ev.ModelCreated(model_id=1, name="m", owner="o", labels=["a"]), at=5)
    model = fold("models", None, created)
    assert model == {
        "name": "m",
        "model_id": 1,
        "description": "",
        "metadata_json": "{}",
        "labels": '["a"]',
        "owner": "o",
        "created_at_ns": 5,
    }
    other = envelope(ev.ModelCreated(model_id=2, name="m", owner="p"))
    assert fold("models", model, other) == model
    version = ev.ModelVersionRegistered(
        model_name="m", model_id=1, version=2, checkpoint_uuid="c", experiment_id=3
    )
    row = fold("model_versions", None, envelope(version))
    assert row is not None and (row["id"], row["checkpoint_uuid"], row["experiment_id"]) == ("m:2", "c", 3)
