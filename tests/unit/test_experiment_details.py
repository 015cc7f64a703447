"""The rules of an experiment's edits (features/experiments/details.py: archive,
name, description, notes, labels, listing filters), the rows their events
leave (projection.py), and Determined's PATCH body read into a request."""

import json
from typing import Any

import pytest
from test_projection import experiment, plan, written

from determined.common import states
from determined.proto import api_pb2
from determined.proto import events_pb2 as ev
from services.gateway.errors import FailedPreconditionError, InvalidArgumentError
from services.gateway.features.commands import Unchanged
from services.gateway.features.experiments import details
from services.gateway.features.experiments.queries import ExperimentListing
from services.gateway.http.experiment_edits import patch_request


def shown(**fields: Any) -> api_pb2.Experiment:
    return api_pb2.Experiment(**{"id": 3, "name": "mnist", "state": "COMPLETED", **fields})


# -- archive -------------------------------------------------------------------------


@pytest.mark.parametrize("state", sorted(states.TERMINAL_STATES))
def test_an_ended_experiment_is_archived_at_its_version(state: str) -> None:
    append = details.archive_set(shown(state=state), True, 17)
    assert not isinstance(append, Unchanged)
    assert append.payload == ev.ExperimentArchiveSet(experiment_id=3, archived=True)
    assert (append.aggregate, append.msg_id, append.expected_version) == ("experiment/3", "archive-3-17", 17)


@pytest.mark.parametrize(
    "state", sorted(set(states.ExperimentState) - states.TERMINAL_STATES - {states.ExperimentState.DELETED})
)
def test_only_an_ended_experiment_can_be_archived(state: str) -> None:
    with pytest.raises(FailedPreconditionError) as refused:
        details.archive_set(shown(state=state), True, 1)
    assert str(refused.value) == f"Experiment 3 is {state}: only an ended experiment can be archived"


def test_archiving_twice_or_unarchiving_what_is_not_archived_changes_nothing() -> None:
    assert details.archive_set(shown(archived=True), True, 1) == Unchanged("Experiment 3 is already archived")
    assert details.archive_set(shown(), False, 1) == Unchanged("Experiment 3 is not archived")


def test_an_archived_experiment_is_unarchived_whatever_its_state() -> None:
    append = details.archive_set(shown(archived=True, state="ACTIVE"), False, 4)
    assert not isinstance(append, Unchanged)
    assert append.payload == ev.ExperimentArchiveSet(experiment_id=3, archived=False)
    assert append.msg_id == "unarchive-3-4"


# -- name, description, notes, labels -------------------------------------------------


def test_only_the_fields_that_change_are_recorded() -> None:
    append = details.details_set(
        shown(description="old", labels=["a"]), 9, name="mnist", description="new", labels=["a", "b"]
    )
    assert not isinstance(append, Unchanged)
    payload = append.payload
    assert isinstance(payload, ev.ExperimentDetailsSet)
    assert not payload.HasField("name") and not payload.HasField("notes")
    assert payload.description == "new" and list(payload.labels.labels) == ["a", "b"]
    assert (append.msg_id, append.expected_version) == ("details-3-9", 9)


def test_an_edit_that_changes_nothing_appends_nothing() -> None:
    same = shown(description="d", notes="n", labels=["x"])
    decision = details.details_set(same, 2, name="mnist", description="d", notes="n", labels=["x", "x"])
    assert decision == Unchanged("Experiment 3 is so already: nothing to change")


def test_clearing_the_labels_is_an_edit() -> None:
    append = details.details_set(shown(labels=["x"]), 2, labels=[])
    assert not isinstance(append, Unchanged)
    assert isinstance(append.payload, ev.ExperimentDetailsSet) and append.payload.HasField("labels")
    assert list(append.payload.labels.labels) == []


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"name": "  "}, "must not be empty or only spaces"),
        ({"name": "n" * 256}, "name is 256 characters long; at most 255"),
        ({"description": "d" * 10_001}, "description is 10001 characters long"),
        ({"notes": "n" * 100_001}, "notes is 100001 characters long"),
        ({"name": "a\x00b"}, "name must not hold control characters"),
        ({"labels": ["ok", ""]}, "a label must not be empty"),
        ({"labels": [" padded"]}, "start or end with a space"),
        ({"labels": ["a,b"]}, "must not hold a comma"),
        ({"labels": ["l" * 256]}, "a label is 256 characters long"),
        ({"labels": [str(n) for n in range(101)]}, "at most 100 labels, not 101"),
    ],
)
def test_an_edit_past_its_limits_is_refused_naming_why(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        details.details_set(shown(), 1, **fields)


def test_notes_and_descriptions_may_span_lines() -> None:
    append = details.details_set(shown(), 1, notes="# Run\n\n\tlr 0.1", description="two\nlines")
    assert not isinstance(append, Unchanged)


def test_a_label_is_added_last_once_and_removed_wherever_it_is() -> None:
    assert details.label_added(["a", "b"], "c") == ["a", "b", "c"]
    assert details.label_added(["a", "b"], "a") == ["a", "b"]
    assert details.label_removed(["a", "b", "c"], "b") == ["a", "c"]
    assert details.label_removed(["a"], "z") == ["a"]
    with pytest.raises(InvalidArgumentError):
        details.label_added([], "x,y")


# -- listings ------------------------------------------------------------------------


def test_a_listing_request_becomes_its_checked_filters() -> None:
    request = api_pb2.GetExperimentsRequest(
        states=["STATE_COMPLETED", "error"],
        users=["ann"],
        name="mni",
        labels=["prod"],
        sort_by="searcher_metric_val",
        descending=True,
        archived=False,
    )
    assert details.listing_of(request) == ExperimentListing(
        states=("COMPLETED", "ERROR"),
        owners=("ann",),
        name="mni",
        labels=("prod",),
        archived=False,
        sort_by="best_trial_searcher_metric",
        descending=True,
    )
    assert details.listing_of(api_pb2.GetExperimentsRequest()) == ExperimentListing()
    assert details.listing_of(api_pb2.GetExperimentsRequest(archived=True)).archived is True
    assert details.listing_of(api_pb2.GetExperimentsRequest(sort_by="user")).sort_by == "owner"


@pytest.mark.parametrize(
    ("request_fields", "words"),
    [
        ({"states": ["RUNNING"]}, "'RUNNING' is not an experiment state"),
        ({"sort_by": "colour"}, "sort_by 'colour' is not one of id, name"),
        ({"limit": -1}, "limit must be 0 .all. to 10000"),
        ({"offset": -5}, "offset at least 0"),
        ({"labels": ["x"] * 101}, "labels may name at most 100"),
        ({"name": "n" * 300}, "the name filter is 300 characters long"),
    ],
)
def test_a_bad_listing_is_refused_naming_the_filter(request_fields: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        details.listing_of(api_pb2.GetExperimentsRequest(**request_fields))


def test_a_listing_filters_archived_ones_and_labels_in_sql() -> None:
    where, args = ExperimentListing(labels=("a", "b"), archived=False).where()
    assert "e.labels @> $1::jsonb" in where and "e.archived = $2" in where
    assert args == [json.dumps(["a", "b"]), False]


# -- rows ----------------------------------------------------------------------------


def test_the_events_change_the_rows_users_see_and_not_the_stored_config() -> None:
    stored = experiment(config_json='{"name": "e"}', labels='["old"]')
    batch = plan(
        ev.ExperimentDetailsSet(
            experiment_id=1, name="renamed", labels=ev.ExperimentLabels(labels=["x", "y"])
        ),
        ev.ExperimentDetailsSet(experiment_id=1, notes="see the wiki"),
        ev.ExperimentArchiveSet(experiment_id=1, archived=True),
    )
    row = written(batch, experiments=[stored])["experiments"][1]
    assert (row["name"], json.loads(row["labels"]), row["notes"], row["archived"]) == (
        "renamed",
        ["x", "y"],
        "see the wiki",
        True,
    )
    assert row["description"] == stored["description"] and row["config_json"] == '{"name": "e"}'


def test_a_fork_and_a_detached_run_are_marked_from_their_creation() -> None:
    created = ev.ExperimentCreated(experiment_id=2, name="f", owner="o", parent_id=1, unmanaged=True)
    row = written(plan(created), experiments=[])["experiments"][2]
    assert (row["parent_id"], row["unmanaged"], row["archived"], row["notes"]) == (1, True, False, "")


def test_an_edit_of_an_experiment_never_seen_writes_nothing() -> None:
    assert written(plan(ev.ExperimentArchiveSet(experiment_id=8, archived=True)), experiments=[]) == {}


# -- Determined's PATCH body ---------------------------------------------------------


def test_a_patch_body_sets_what_it_holds_and_null_leaves_a_field_as_it_is() -> None:
    request = patch_request(4, {"id": 4, "name": "n", "description": None, "labels": ["a"], "notes": ""})
    assert request.HasField("name") and request.HasField("notes") and not request.HasField("description")
    assert list(request.labels.labels) == ["a"]
    assert not patch_request(4, {"id": 4}).HasField("labels")


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"resources": {"priority": 3}}, "resources cannot be patched here"),
        ({"name": 5}, "name must be a string"),
        ({"labels": "a"}, "labels must be a list of strings"),
        ({"labels": [1]}, "labels must be a list of strings"),
    ],
)
def test_a_bad_patch_body_is_refused(body: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidArgumentError, match=words):
        patch_request(4, body)
