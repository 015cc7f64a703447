"""The gateway's pure checkpoint and model registry rules: listing order,
the GC preview, and what each deletion, policy and registry request appends
or why it is refused."""

import json
import math

import pytest

from determined.proto import api_pb2, events_pb2
from services.common.gc_policy import GcPolicy
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from services.gateway.features.checkpoints import commands as rules
from services.gateway.features.commands import Unchanged
from services.gateway.features.models import commands as models


def checkpoint(
    uuid: str,
    *,
    trial_id: int = 1,
    steps: int = 10,
    at: int = 0,
    metric: float | None = None,
    validation: dict[str, object] | None = None,
    state: str = "COMPLETED",
    experiment_id: int = 7,
    resources: dict[str, int] | None = None,
    versions: tuple[str, ...] = (),
) -> api_pb2.Checkpoint:
    found = api_pb2.Checkpoint(
        uuid=uuid,
        trial_id=trial_id,
        experiment_id=experiment_id,
        steps_completed=steps,
        reported_at_ns=at,
        state=state,
        resources=resources or {"a": 1},
        model_versions=versions,
        validation_metrics_json=json.dumps(validation) if validation is not None else "",
    )
    if metric is not None:
        found.searcher_metric = metric
    return found


def uuids(found: list[api_pb2.Checkpoint]) -> list[str]:
    return [c.uuid for c in found]


def sort(
    found: list[api_pb2.Checkpoint], sort_by: str, order_by: str = "", smaller: bool = True
) -> list[str]:
    return uuids(
        rules.sorted_checkpoints(found, sort_by, order_by, searcher_metric="loss", smaller_is_better=smaller)
    )


# -- metric values and listings ---------------------------------------------------------


def test_metric_values_read_numbers_and_the_non_finite_strings_only() -> None:
    metrics = json.dumps({"loss": 2, "acc": 0.5, "nan": "NaN", "inf": "-Infinity", "flag": True, "name": "x"})
    assert rules.metric_value(metrics, "loss") == 2.0
    assert rules.metric_value(metrics, "acc") == 0.5
    assert math.isnan(rules.metric_value(metrics, "nan") or 0.0)
    assert rules.metric_value(metrics, "inf") == -math.inf
    assert [rules.metric_value(metrics, name) for name in ("flag", "name", "missing")] == [None, None, None]
    assert rules.metric_value("", "loss") is None and rules.metric_value("[1]", "loss") is None


def test_listings_sort_by_report_time_by_default() -> None:
    found = [checkpoint("b", at=2), checkpoint("a", at=2), checkpoint("c", at=1)]
    assert sort(found, "") == ["c", "a", "b"]
    assert sort(found, "", "desc") == ["b", "a", "c"]


def test_steps_sort_ascending_and_keep_report_order_between_equals() -> None:
    found = [
        checkpoint("late", steps=20, at=3),
        checkpoint("x", steps=30, at=1),
        checkpoint("early", steps=20, at=2),
    ]
    assert sort(found, "steps_completed") == ["early", "late", "x"]
    assert sort(found, "steps_completed", "desc") == ["x", "early", "late"]


@pytest.mark.parametrize("sort_by", ["searcher_metric", "loss"])
def test_the_searcher_metric_sorts_best_first_with_no_metric_last(sort_by: str) -> None:
    found = [
        checkpoint("none", at=1),
        checkpoint("worse", metric=0.5, at=2),
        checkpoint("nan", metric=math.nan, at=3),
        checkpoint("best", metric=0.1, at=4),
    ]
    for c in found:  # the metric sort by name reads the validation
        if c.HasField("searcher_metric"):
            c.validation_metrics_json = json.dumps(
                {"loss": "NaN" if math.isnan(c.searcher_metric) else c.searcher_metric}
            )
    assert sort(found, sort_by) == ["best", "worse", "none", "nan"]
    assert sort(found, sort_by, smaller=False) == ["worse", "best", "none", "nan"]
    assert sort(found, sort_by, "desc") == ["worse", "best", "none", "nan"]
    assert sort(found, sort_by, "asc", smaller=False) == ["best", "worse", "none", "nan"]


def test_another_metric_sorts_ascending_from_the_validation() -> None:
    found = [
        checkpoint("a", validation={"acc": 0.9}),
        checkpoint("b", validation={"acc": 0.7}),
        checkpoint("c"),
    ]
    assert sort(found, "acc") == ["b", "a", "c"]
    assert sort(found, "acc", "desc") == ["a", "b", "c"]


def test_listings_hide_deleted_checkpoints_and_cut_at_max_results() -> None:
    found = [checkpoint("a", at=1), checkpoint("gone", at=2, state="DELETED"), checkpoint("b", at=3)]

    def listed(max_results: int = 0, include_deleted: bool = False) -> list[str]:
        listing = rules.checked_listing("", "", max_results, include_deleted)
        return uuids(rules.listed(found, listing, searcher_metric="loss", smaller_is_better=True))

    assert listed() == ["a", "b"]
    assert listed(include_deleted=True) == ["a", "gone", "b"]
    assert listed(max_results=1) == ["a"]


def test_bad_listing_requests_are_refused() -> None:
    assert rules.checked_listing(" loss ", "DESC", 0, False) == rules.Listing("loss", "desc", 0, False)
    with pytest.raises(InvalidArgumentError, match="order_by"):
        rules.checked_listing("", "sideways", 0, False)
    with pytest.raises(InvalidArgumentError, match="max_results"):
        rules.checked_listing("", "", -1, False)


# -- GC ----------------------------------------------------------------------------------


def test_the_preview_applies_the_policy_to_what_still_holds_files() -> None:
    found = [
        checkpoint("t1-best", trial_id=1, steps=10, at=1, metric=0.1),
        checkpoint("t1-mid", trial_id=1, steps=20, at=2, metric=0.5),
        checkpoint("t1-latest", trial_id=1, steps=30, at=3, metric=0.9),
        checkpoint("t2-old", trial_id=2, steps=10, at=4, resources={"x": 5, "y": 6}),
        checkpoint("t2-latest", trial_id=2, steps=20, at=5),
        checkpoint("t2-gone", trial_id=2, steps=5, at=0, state="DELETED"),
        checkpoint("t2-going", trial_id=2, steps=6, at=0, state="DELETING"),
    ]
    inputs = rules.GcInputs(found, {"t1-best": 1, "t1-mid": 2, "t1-latest": 3}, True, frozenset())
    deleted = rules.gc_deletes(inputs, GcPolicy(0, 1, 1))
    assert uuids(deleted) == ["t1-mid", "t2-old"]
    assert rules.freed_bytes(deleted) == 12
    protected = rules.GcInputs(found, inputs.validated_at_ns, True, frozenset({"t2-old"}))
    assert uuids(rules.gc_deletes(protected, GcPolicy(0, 0, 0))) == [
        "t1-best",
        "t1-mid",
        "t1-latest",
        "t2-latest",
    ]
    found[1].state = "PARTIALLY_DELETED"  # what the storage refused is deleted again
    assert "t1-mid" in uuids(rules.gc_deletes(inputs, GcPolicy(0, 1, 1)))


def test_stored_policy_reads_the_config_with_determineds_defaults() -> None:
    config = json.dumps({"checkpoint_storage": {"type": "shared_fs", "save_trial_best": 3}})
    assert rules.stored_policy(config) == GcPolicy(0, 3, 1)
    assert rules.stored_policy("{}") == rules.DEFAULT_POLICY == GcPolicy(0, 1, 1)
    assert rules.checked_policy(0, 0, 0) == GcPolicy(0, 0, 0)
    with pytest.raises(InvalidArgumentError, match="save_trial_latest"):
        rules.checked_policy(0, 1, -1)


def test_a_new_policy_is_appended_against_the_experiments_version() -> None:
    append = rules.gc_policy_changed(
        7, "ACTIVE", GcPolicy(0, 1, 1), GcPolicy(2, 0, 1), deletes_now=0, version=12
    )
    assert not isinstance(append, Unchanged)
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        "experiment/7",
        "gc-policy-7-12",
        12,
    )
    assert append.payload == events_pb2.CheckpointGcPolicyChanged(
        experiment_id=7, save_experiment_best=2, save_trial_best=0, save_trial_latest=1
    )


def test_the_same_policy_again_applies_only_when_it_still_deletes_something() -> None:
    same = GcPolicy(0, 1, 1)
    assert isinstance(
        rules.gc_policy_changed(7, "COMPLETED", same, same, deletes_now=0, version=3), Unchanged
    )
    assert isinstance(rules.gc_policy_changed(7, "ACTIVE", same, same, deletes_now=2, version=3), Unchanged)
    retried = rules.gc_policy_changed(7, "COMPLETED", same, same, deletes_now=2, version=3)
    assert not isinstance(retried, Unchanged)
    for state in ("DELETING", "DELETE_FAILED"):
        with pytest.raises(FailedPreconditionError, match=state):
            rules.gc_policy_changed(7, state, same, GcPolicy(0, 0, 0), deletes_now=0, version=3)


# -- deleting experiments -----------------------------------------------------------------


def test_an_ended_experiment_is_deleted_with_a_numbered_request() -> None:
    append = rules.experiment_delete_requested(7, "COMPLETED", 0, {}, version=9)
    assert not isinstance(append, Unchanged)
    assert (append.msg_id, append.expected_version) == ("experiment-delete-7-1", 9)
    retry = rules.experiment_delete_requested(7, "DELETE_FAILED", 1, {}, version=14)
    assert not isinstance(retry, Unchanged) and retry.msg_id == "experiment-delete-7-2"
    assert isinstance(rules.experiment_delete_requested(7, "DELETING", 1, {}, version=9), Unchanged)


def test_running_experiments_and_model_versions_are_not_deleted() -> None:
    for state in ("ACTIVE", "PAUSED", "STOPPING_KILLED"):
        with pytest.raises(FailedPreconditionError, match="COMPLETED, CANCELED, ERROR or DELETE_FAILED"):
            rules.experiment_delete_requested(7, state, 0, {}, version=1)
    with pytest.raises(FailedPreconditionError, match=r"c1 \(mnist:1, mnist:2\)"):
        rules.experiment_delete_requested(7, "CANCELED", 0, {"c1": ["mnist:1", "mnist:2"]}, version=1)


def test_only_the_owner_or_admin_deletes_an_experiment() -> None:
    rules.check_owner_or_admin(7, "ann", "ann", admin=False, what="delete it")
    rules.check_owner_or_admin(7, "ann", "root", admin=True, what="delete it")
    with pytest.raises(
        PermissionDeniedError, match="belongs to ann: only its owner or an admin may delete it"
    ):
        rules.check_owner_or_admin(7, "ann", "bob", admin=False, what="delete it")


def test_a_user_deletes_checkpoints_of_their_own_experiments_only() -> None:
    found = [
        checkpoint("a", experiment_id=1),
        checkpoint("b", experiment_id=2),
        checkpoint("c", experiment_id=2),
    ]
    owners = {1: "bob", 2: "ann"}
    rules.check_may_delete_checkpoints(found[1:], owners, "ann", admin=False)
    rules.check_may_delete_checkpoints(found, owners, "root", admin=True)
    with pytest.raises(
        PermissionDeniedError, match=r"experiment 1 belongs to bob: .* delete its checkpoints \(a\)"
    ):
        rules.check_may_delete_checkpoints(found, owners, "ann", admin=False)
    with pytest.raises(PermissionDeniedError, match="experiment 2 belongs to ann"):
        rules.check_may_delete_checkpoints(found[1:], owners, "mallory", admin=False)


# -- deleting checkpoints -------------------------------------------------------------------


def asked(
    names: list[str],
    found: dict[str, api_pb2.Checkpoint],
    globs: tuple[str, ...] = (),
    trial_id: int | None = None,
    sources: frozenset[str] = frozenset(),
) -> list[events_pb2.CheckpointDeleteAsked]:
    appends = rules.checkpoint_delete_asked(
        names, found, globs, warm_start_sources=sources, actor="user:ann", trial_id=trial_id
    )
    return [append.payload for append in appends]  # type: ignore[misc]


def test_a_deletion_is_asked_once_per_experiment_without_deleted_checkpoints() -> None:
    found = {
        "a": checkpoint("a", experiment_id=2),
        "b": checkpoint("b", experiment_id=1),
        "c": checkpoint("c", experiment_id=2),
        "gone": checkpoint("gone", state="DELETED"),
    }
    events = asked(["a", "b", "c", "a", "gone"], found, globs=("*.pt",))
    assert [(e.experiment_id, list(e.uuids), list(e.globs), e.asked_by) for e in events] == [
        (1, ["b"], ["*.pt"], "user:ann"),
        (2, ["a", "c"], ["*.pt"], "user:ann"),
    ]
    appends = rules.checkpoint_delete_asked(
        ["a"], found, (), warm_start_sources=set(), actor="user:ann", trial_id=None
    )
    again = rules.checkpoint_delete_asked(
        ["a"], found, (), warm_start_sources=set(), actor="user:ann", trial_id=None
    )
    assert appends[0].msg_id == again[0].msg_id and appends[0].msg_id.startswith("delete-asked-2-")
    assert asked(["gone"], found) == []


def test_a_deletion_naming_what_may_not_go_is_refused_whole() -> None:
    found = {"a": checkpoint("a", trial_id=3), "v": checkpoint("v", versions=("m:1",)), "w": checkpoint("w")}
    with pytest.raises(NotFoundError, match="nope"):
        asked(["a", "nope"], found)
    with pytest.raises(InvalidArgumentError, match=r"v \(m:1\)"):
        asked(["a", "v"], found)
    with pytest.raises(InvalidArgumentError, match="warm-start from are never deleted: w"):
        asked(["a", "w"], found, sources=frozenset({"w"}))
    with pytest.raises(PermissionDeniedError, match="trial 3 may delete its own checkpoints only, not w"):
        asked(["a", "w"], found, trial_id=3)
    assert [list(e.uuids) for e in asked(["a"], found, trial_id=3)] == [["a"]]
    with pytest.raises(InvalidArgumentError, match="uuids"):
        asked([], found)


@pytest.mark.parametrize("glob", ["", " ", "../x", "a/../../b", "/etc/*"])
def test_globs_stay_inside_the_checkpoint(glob: str) -> None:
    with pytest.raises(InvalidArgumentError):
        rules.checked_globs([glob])
    assert rules.checked_globs(["*.pt", "logs/**", "*.pt"]) == ["*.pt", "logs/**"]


# -- downloads ------------------------------------------------------------------------------


def test_only_recorded_files_are_downloaded_from_an_offset_within_them() -> None:
    found = checkpoint("a", resources={"model.pt": 10, "logs/": 0, "metadata.json": 2})
    assert rules.downloaded_size(found, "model.pt", 0) == 10
    assert rules.downloaded_size(found, "model.pt", 10) == 10
    with pytest.raises(InvalidArgumentError, match="offset"):
        rules.downloaded_size(found, "model.pt", 11)
    with pytest.raises(InvalidArgumentError, match="folder"):
        rules.downloaded_size(found, "logs/", 0)
    with pytest.raises(NotFoundError, match="no file '../secret'"):
        rules.downloaded_size(found, "../secret", 0)
    found.state = "DELETED"
    with pytest.raises(NotFoundError, match="was deleted"):
        rules.downloaded_size(found, "model.pt", 0)


def test_the_storage_section_must_be_an_object() -> None:
    assert rules.storage_section('{"type": "shared_fs"}') == {"type": "shared_fs"}
    for text in ("", "null", "[]", "{"):
        with pytest.raises(FailedPreconditionError):
            rules.storage_section(text)


# -- the model registry -------------------------------------------------------------------------


def test_a_model_is_created_once_under_a_subject_safe_name() -> None:
    request = api_pb2.CreateModelRequest(name="mnist-cnn_2", metadata_json='{"a": 1}', labels=["x", "x", "y"])
    append = models.model_created(request, model_id=3, owner="ann")
    assert (append.aggregate, append.msg_id, append.expected_version) == (
        "model/mnist-cnn_2",
        "model-mnist-cnn_2",
        0,
    )
    assert list(append.payload.labels) == ["x", "y"]  # type: ignore[attr-defined]
    for name in ("", "a.b", "a b", "-lead", "x" * 129, "a>"):
        with pytest.raises(InvalidArgumentError, match="name"):
            models.checked_name(name)
    with pytest.raises(InvalidArgumentError, match="JSON object"):
        models.model_created(
            api_pb2.CreateModelRequest(name="m", metadata_json="[1]"), model_id=1, owner="ann"
        )
    with pytest.raises(InvalidArgumentError, match="label"):
        models.model_created(api_pb2.CreateModelRequest(name="m", labels=[" "]), model_id=1, owner="ann")


def test_only_a_completed_checkpoint_of_a_kept_experiment_becomes_a_version() -> None:
    request = api_pb2.RegisterModelVersionRequest(
        model_name="m", checkpoint_uuid="c", name="v", comment="best"
    )
    found = checkpoint("c", trial_id=4, experiment_id=2)

    def registered(state: str = "COMPLETED") -> object:
        return models.model_version_registered(
            request,
            model_id=1,
            version=3,
            checkpoint=found,
            experiment_state=state,
            owner="ann",
            model_version=8,
        )

    append = registered()
    assert (append.msg_id, append.expected_version) == ("model-version-m-3", 8)  # type: ignore[attr-defined]
    assert append.payload == events_pb2.ModelVersionRegistered(  # type: ignore[attr-defined]
        model_name="m",
        model_id=1,
        version=3,
        checkpoint_uuid="c",
        experiment_id=2,
        trial_id=4,
        name="v",
        comment="best",
        owner="ann",
    )
    with pytest.raises(FailedPreconditionError, match="DELETING"):
        registered("DELETING")
    found.state = "PARTIALLY_DELETED"
    with pytest.raises(FailedPreconditionError, match="only a COMPLETED checkpoint"):
        registered()
