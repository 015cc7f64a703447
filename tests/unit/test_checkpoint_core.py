"""The checkpoint service's pure core: given events, then the deletions it
decides, and how each outcome settles a checkpoint and a deleted experiment."""

import itertools
import json

import pytest
from google.protobuf.message import Message

from determined.proto import events_pb2 as ev
from services.checkpoint.core import GcCore
from services.checkpoint.state import GcState, Status
from services.common.envelope import Append, Envelope, aggregate, subject_kind, wrap

ES = ev.ExperimentState
core = GcCore()
_event_ids = itertools.count()
STORAGE = {"type": "shared_fs", "host_path": "/srv/checkpoints", "save_trial_best": 1}
FILES = {"model.pt": 1000, "metadata.json": 24}


def aggregate_of(payload: Message) -> str:
    kind = subject_kind(payload)
    key = {
        "experiment": "experiment_id",
        "checkpoint": "uuid",
        "validation": "trial_id",
        "model": "model_name",
    }
    return aggregate(kind, getattr(payload, key[kind]))


class Gc:
    """The core driven like the Shell: events folded, decisions folded back."""

    def __init__(self) -> None:
        self.state: GcState = core.initial_state()
        self.log: list[Message] = []
        self.envelopes: list[Envelope] = []

    def given(self, *payloads: Message) -> "Gc":
        for payload in payloads:
            self._fold(Append(aggregate_of(payload), payload, f"given-{next(_event_ids)}"))
        return self

    def _fold(self, append: Append) -> None:
        envelope = wrap(append, actor="test", occurred_at_ns=0)
        self.state = core.evolve(self.state, envelope)
        self.log.append(append.payload)
        self.envelopes.append(envelope)

    def decide(self) -> list[Append]:
        """Every decision until the core has nothing more to say."""
        decided: list[Append] = []
        for _ in range(100):
            appends = core.decide(self.state)
            if not appends:
                return decided
            for append in appends:
                self._fold(append)
            decided += appends
        raise AssertionError("decisions did not settle")

    def deletions(self) -> list[ev.CheckpointDeletionRequested]:
        return [a.payload for a in self.decide() if isinstance(a.payload, ev.CheckpointDeletionRequested)]

    def deletion(self) -> ev.CheckpointDeletionRequested:
        [deletion] = self.deletions()
        return deletion

    def status(self, uuid: str) -> Status:
        [checkpoint] = [c for e in self.state.experiments.values() for c in e.checkpoints() if c.uuid == uuid]
        return checkpoint.status

    def outcomes(self, partial: dict[str, str] | None = None) -> "Gc":
        """What the deleter records for every checkpoint still DELETING: deleted,
        or (for those named in `partial`) its files left with that error."""
        partial = partial or {}
        for deletion in list(self.state.deleting.values()):
            for target in self.state.unsettled(deletion):
                common = {
                    "uuid": target.uuid,
                    "experiment_id": deletion.experiment_id,
                    "trial_id": target.trial_id,
                    "deletion_id": deletion.deletion_id,
                }
                if target.uuid in partial:
                    error = partial[target.uuid]
                    self.given(
                        ev.CheckpointPartiallyDeleted(**common, remaining=target.resources, error=error)
                    )
                else:
                    self.given(ev.CheckpointDeleted(**common, bytes_freed=target.bytes))
        return self

    def tensorboards(self, error: str = "", remaining: dict[str, int] | None = None) -> "Gc":
        """What the deleter records for the TensorBoard files of every experiment
        being deleted that awaits them: all gone, or `remaining` left with `error`."""
        for experiment in list(self.state.experiments.values()):
            if experiment.tensorboards_due:
                outcome = ev.TensorboardFilesDeleted(
                    experiment_id=experiment.experiment_id,
                    delete_request=experiment.delete_requests,
                    remaining=remaining or {},
                    error=error,
                )
                self.given(outcome)
        return self


def created(
    experiment_id: int = 1, storage: dict[str, object] | None = None, **searcher: object
) -> ev.ExperimentCreated:
    config = {
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 100}, **searcher},
        "hyperparameters": {"lr": 0.1},
        "checkpoint_storage": storage or STORAGE,
    }
    return ev.ExperimentCreated(experiment_id=experiment_id, config_json=json.dumps(config))


def checkpoint(uuid: str, trial_id: int, steps: int, experiment_id: int = 1) -> ev.CheckpointReported:
    return ev.CheckpointReported(
        uuid=uuid, trial_id=trial_id, experiment_id=experiment_id, steps_completed=steps, resources=FILES
    )


def validation(trial_id: int, steps: int, loss: object, experiment_id: int = 1) -> ev.TrialValidationReported:
    metrics = json.dumps({"loss": loss, "accuracy": 0.5})
    return ev.TrialValidationReported(
        trial_id=trial_id, experiment_id=experiment_id, steps_completed=steps, metrics_json=metrics
    )


def ended(experiment_id: int = 1, state: int = ES.EXPERIMENT_STATE_COMPLETED) -> ev.ExperimentStateChanged:
    return ev.ExperimentStateChanged(experiment_id=experiment_id, state=state)


def policy(best: int, trial_best: int, latest: int, experiment_id: int = 1) -> ev.CheckpointGcPolicyChanged:
    return ev.CheckpointGcPolicyChanged(
        experiment_id=experiment_id,
        save_experiment_best=best,
        save_trial_best=trial_best,
        save_trial_latest=latest,
    )


def delete_requested(experiment_id: int = 1) -> ev.ExperimentDeleteRequested:
    return ev.ExperimentDeleteRequested(experiment_id=experiment_id)


def trained() -> Gc:
    """Experiment 1: trial 1 checkpoints at 100, 200, 300 (best at 200);
    trial 2 at 100 (best), 200 (no validation)."""
    return Gc().given(
        created(),
        validation(1, 100, 0.5),
        checkpoint("a", 1, 100),
        validation(1, 200, 0.3),
        checkpoint("b", 1, 200),
        checkpoint("c", 1, 300),
        validation(1, 300, 0.4),
        validation(2, 100, 0.1),
        checkpoint("d", 2, 100),
        checkpoint("e", 2, 200),
    )


# -- when GC runs ---------------------------------------------------------------------


def test_nothing_is_deleted_while_the_experiment_runs() -> None:
    assert trained().decide() == []


@pytest.mark.parametrize(
    "state", [ES.EXPERIMENT_STATE_COMPLETED, ES.EXPERIMENT_STATE_CANCELED, ES.EXPERIMENT_STATE_ERROR]
)
def test_an_ended_experiment_deletes_what_its_policy_does_not_keep(state: int) -> None:
    gc = trained().given(ended(state=state))
    [append] = gc.decide()
    deletion = append.payload
    assert isinstance(deletion, ev.CheckpointDeletionRequested)
    assert (append.aggregate, append.msg_id) == ("experiment/1", "gc-1-1")
    # Default policy 0/1/1: trial 1 keeps b (best) and c (latest), trial 2 keeps d and e.
    assert list(deletion.uuids) == ["a"]
    assert (deletion.experiment_id, deletion.deletion_id, deletion.reason) == (1, 1, "experiment ended")
    assert json.loads(deletion.storage_json)["host_path"] == "/srv/checkpoints"
    assert deletion.bytes == sum(FILES.values())
    assert list(deletion.globs) == []
    assert gc.status("a") is Status.DELETING and gc.status("b") is Status.COMPLETED


@pytest.mark.parametrize("state", [ES.EXPERIMENT_STATE_PAUSED, ES.EXPERIMENT_STATE_STOPPING_COMPLETED])
def test_states_short_of_the_end_delete_nothing(state: int) -> None:
    assert trained().given(ended(state=state)).decide() == []


def test_the_policy_of_the_config_applies() -> None:
    storage = {**STORAGE, "save_experiment_best": 1, "save_trial_best": 0, "save_trial_latest": 0}
    gc = Gc().given(created(storage=storage), *trained().log[1:], ended())
    assert sorted(gc.deletion().uuids) == ["a", "b", "c", "e"]


def test_larger_is_better_when_the_searcher_says_so() -> None:
    storage = {**STORAGE, "save_trial_latest": 0}
    gc = Gc().given(created(storage=storage, smaller_is_better=False), *trained().log[1:], ended())
    # Trial 1's best is now a (0.5); trial 2 keeps d, its only validated one.
    assert sorted(gc.deletion().uuids) == ["b", "c", "e"]


def test_an_experiment_with_nothing_to_delete_decides_nothing() -> None:
    gc = Gc().given(created(), validation(1, 100, 0.5), checkpoint("a", 1, 100), ended())
    assert gc.decide() == []


def test_an_experiment_ends_once() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.given(ended(state=ES.EXPERIMENT_STATE_CANCELED))
    assert gc.decide() == []


# -- outcomes -----------------------------------------------------------------------------


def test_an_outcome_settles_the_checkpoint_and_closes_the_deletion() -> None:
    gc = trained().given(ended())
    gc.deletion()
    assert list(gc.state.deleting) == [(1, 1)]
    gc.outcomes()
    assert gc.status("a") is Status.DELETED
    assert gc.state.deleting == {}
    assert gc.decide() == []


def test_a_partial_outcome_keeps_what_is_left_and_why() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.outcomes(partial={"a": "AccessDenied: model.pt"})
    [a] = [c for c in gc.state.experiments[1].checkpoints() if c.uuid == "a"]
    assert (a.status, a.resources, a.error) == (Status.PARTIALLY_DELETED, FILES, "AccessDenied: model.pt")
    assert gc.state.deleting == {}


def test_a_repeated_outcome_changes_nothing() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.outcomes()
    before = gc.state
    gc.given(ev.CheckpointDeleted(uuid="a", experiment_id=1, trial_id=1, deletion_id=1))
    gc.given(
        ev.CheckpointPartiallyDeleted(uuid="a", experiment_id=1, trial_id=1, deletion_id=1, error="late")
    )
    assert gc.state.experiments == before.experiments and gc.state.deleting == {}


def test_unsettled_is_what_has_no_outcome_yet() -> None:
    gc = trained().given(ended(), policy(0, 0, 0))
    deletions = gc.deletions()
    assert [d.deletion_id for d in deletions] == [1, 2]
    gc.given(ev.CheckpointDeleted(uuid="b", experiment_id=1, trial_id=1, deletion_id=2))
    second = gc.state.deleting[(1, 2)]
    assert sorted(t.uuid for t in gc.state.unsettled(second)) == ["c", "d", "e"]
    assert second.outcomes_awaited == 3


# -- the GC policy changes ----------------------------------------------------------------


def test_a_new_policy_before_the_end_applies_at_the_end() -> None:
    gc = trained().given(policy(0, 0, 1))
    assert gc.decide() == []
    gc.given(ended())
    assert sorted(gc.deletion().uuids) == ["a", "b", "d"]


def test_a_new_policy_after_the_end_applies_at_once_to_what_is_left() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.outcomes()
    gc.given(policy(0, 0, 0))
    [append] = gc.decide()
    deletion = append.payload
    assert isinstance(deletion, ev.CheckpointDeletionRequested)
    assert append.msg_id == "gc-1-2" and deletion.reason == "gc policy changed"
    assert sorted(deletion.uuids) == ["b", "c", "d", "e"]


def test_a_new_policy_never_names_a_checkpoint_being_deleted() -> None:
    gc = trained().given(ended())
    gc.deletion()  # a is DELETING, no outcome yet
    gc.given(policy(0, 0, 0))
    assert "a" not in gc.deletion().uuids


def test_a_deleted_checkpoint_no_longer_counts_as_the_latest() -> None:
    gc = trained().given(ended(), policy(0, 0, 0))
    gc.decide()
    gc.outcomes()
    gc.given(checkpoint("f", 1, 400), checkpoint("g", 1, 500))
    gc.given(policy(0, 0, 1))
    # Only the live checkpoints rank: g is trial 1's latest.
    assert list(gc.deletion().uuids) == ["f"]


def test_a_partially_deleted_checkpoint_is_tried_again_by_the_next_gc() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.outcomes(partial={"a": "busy"})
    gc.given(policy(0, 1, 1))
    assert list(gc.deletion().uuids) == ["a"]


def test_a_policy_that_keeps_more_deletes_nothing() -> None:
    gc = trained().given(ended())
    gc.deletion()
    gc.outcomes()
    gc.given(policy(5, 5, 5))
    assert gc.decide() == []


# -- protected checkpoints -------------------------------------------------------------


def test_a_model_version_is_never_deleted() -> None:
    version = ev.ModelVersionRegistered(model_name="m", version=1, checkpoint_uuid="a", experiment_id=1)
    gc = trained().given(version, ended())
    assert gc.decide() == []
    gc.given(policy(0, 0, 0))
    assert "a" not in gc.deletion().uuids


def test_a_warm_start_source_checkpoint_is_never_deleted() -> None:
    gc = trained().given(created(2, source_checkpoint_uuid="a"), ended(), policy(0, 0, 0))
    assert "a" not in set().union(*(d.uuids for d in gc.deletions()))


def test_a_warm_start_source_trial_protects_its_latest_checkpoint() -> None:
    gc = trained().given(created(2, source_trial_id=1), ended(), policy(0, 0, 0))
    deleted = set().union(*(d.uuids for d in gc.deletions()))
    assert deleted == {"a", "b", "d", "e"}


# -- asked deletions --------------------------------------------------------------------


def asked(
    *uuids: str, globs: tuple[str, ...] = (), by: str = "user:alice", experiment_id: int = 1
) -> ev.CheckpointDeleteAsked:
    return ev.CheckpointDeleteAsked(experiment_id=experiment_id, uuids=uuids, globs=globs, asked_by=by)


def test_a_user_deletes_checkpoints_of_a_running_experiment() -> None:
    gc = trained().given(asked("b", "d"))
    deletion = gc.deletion()
    assert (list(deletion.uuids), deletion.reason) == (["b", "d"], "asked by user:alice")


def test_a_trial_deletes_its_own_checkpoint() -> None:
    assert trained().given(asked("c", by="trial:1")).deletion().reason == "asked by trial:1"


def test_globs_delete_some_files() -> None:
    deletion = trained().given(asked("b", globs=("*.pt",))).deletion()
    assert list(deletion.globs) == ["*.pt"]


def test_asked_deletions_skip_unknown_gone_protected_and_other_experiments_checkpoints() -> None:
    gc = trained().given(
        created(2), checkpoint("x", 9, 100, experiment_id=2), ev.ModelVersionRegistered(checkpoint_uuid="c")
    )
    gc.given(asked("a"))
    gc.deletion()
    gc.outcomes()
    gc.given(asked("a", "c", "x", "nope"))
    assert gc.decide() == []
    gc.given(asked("a", "b"))
    assert list(gc.deletion().uuids) == ["b"]


def test_checkpoints_of_an_unknown_experiment_are_ignored() -> None:
    gc = Gc().given(checkpoint("a", 1, 100, experiment_id=7), ended(7), asked("a", experiment_id=7))
    assert gc.decide() == [] and gc.state.experiments == {}


# -- det experiment delete -------------------------------------------------------------


def test_deleting_an_experiment_deletes_every_checkpoint_then_the_experiment() -> None:
    gc = trained().given(ended())
    gc.decide()
    gc.outcomes()
    gc.given(delete_requested())
    deletion = gc.deletion()
    assert (sorted(deletion.uuids), deletion.reason) == (["b", "c", "d", "e"], "experiment deleted")
    gc.outcomes().tensorboards()
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)
    assert (append.aggregate, append.msg_id) == ("experiment/1", "experiment-deleted-1")
    assert 1 not in gc.state.experiments and gc.state.deletes_due == frozenset()


def test_an_experiment_without_checkpoints_is_deleted_once_its_tensorboard_files_are() -> None:
    gc = Gc().given(created(), ended(), delete_requested())
    assert gc.decide() == []
    [append] = gc.tensorboards().decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_a_deletion_that_leaves_files_fails_and_can_be_retried() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes(partial={"b": "AccessDenied"}).tensorboards()
    [append] = gc.decide()
    failed = append.payload
    assert isinstance(failed, ev.ExperimentDeleteFailed)
    assert append.msg_id == "experiment-delete-failed-1-1"
    assert failed.reason == "1 checkpoint(s) could not be deleted: b: AccessDenied"
    assert gc.decide() == []
    gc.given(delete_requested())
    assert list(gc.deletion().uuids) == ["b"]
    gc.outcomes().tensorboards()
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_a_failed_deletion_names_a_few_checkpoints() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes(partial={u: "denied" for u in "abcde"}).tensorboards()
    gc.given(*[checkpoint(f"z{n}", 3, n) for n in range(3)])
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleteFailed)
    assert append.payload.reason.startswith("8 checkpoint(s) could not be deleted: a: denied;")
    assert append.payload.reason.endswith("(and 3 more)")


def test_an_experiment_being_deleted_waits_for_a_running_gc() -> None:
    gc = trained().given(ended())
    gc.decide()  # a: DELETING, no outcome yet
    gc.given(delete_requested())
    assert sorted(gc.deletion().uuids) == ["b", "c", "d", "e"]
    gc.outcomes().tensorboards()
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_an_experiment_deletion_keeps_protected_checkpoints_and_is_still_deleted() -> None:
    gc = trained().given(created(2, source_checkpoint_uuid="b"), ended(), delete_requested())
    assert "b" not in set().union(*(d.uuids for d in gc.deletions()))
    gc.outcomes().tensorboards()
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_the_answer_waits_for_the_tensorboard_files_whichever_comes_last() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes()
    assert gc.decide() == [] and gc.state.experiments[1].tensorboards_due
    [append] = gc.tensorboards().decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)

    gc = trained().given(ended(), delete_requested())
    gc.decide()
    assert gc.tensorboards().decide() == []
    gc.outcomes()
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


@pytest.mark.parametrize(
    "partial, error, remaining, reason",
    [
        ({}, "AccessDenied", {}, "tensorboard files: AccessDenied"),
        ({}, "", {"trial/1/events.out": 40}, "tensorboard files: files are left"),
        (
            {"b": "busy"},
            "trial/1/events.out: Operation not permitted",
            {"trial/1/events.out": 40},
            "1 checkpoint(s) could not be deleted: b: busy;"
            " tensorboard files: trial/1/events.out: Operation not permitted",
        ),
    ],
)
def test_tensorboard_files_left_fail_the_deletion_and_are_named(
    partial: dict[str, str], error: str, remaining: dict[str, int], reason: str
) -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes(partial=partial).tensorboards(error=error, remaining=remaining)
    [append] = gc.decide()
    assert isinstance(append.payload, ev.ExperimentDeleteFailed)
    assert (append.msg_id, append.payload.reason) == ("experiment-delete-failed-1-1", reason)


def test_a_retry_deletes_the_tensorboard_files_again_and_waits_for_that_outcome() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes().tensorboards(error="AccessDenied")
    [failed] = gc.decide()
    assert isinstance(failed.payload, ev.ExperimentDeleteFailed)
    assert not gc.state.experiments[1].tensorboards_due
    gc.given(delete_requested())
    experiment = gc.state.experiments[1]
    assert (experiment.delete_requests, experiment.tensorboards_due) == (2, True)
    # Nothing else to delete: only the TensorBoard files are awaited; a late
    # outcome of the first request does not stand for the second's.
    gc.given(ev.TensorboardFilesDeleted(experiment_id=1, delete_request=1))
    assert gc.decide() == [] and gc.state.experiments[1].tensorboards_due
    [append] = gc.tensorboards().decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_the_tensorboard_outcome_answers_the_delete_request_it_names() -> None:
    gc = trained().given(ended(), delete_requested())
    [request] = [e for e in gc.envelopes if e.WhichOneof("payload") == "experiment_delete_requested"]
    experiment = gc.state.experiments[1]
    assert (experiment.delete_event_id, experiment.delete_correlation_id) == (
        request.event_id,
        request.correlation_id,
    )


def test_a_tensorboard_outcome_of_an_unknown_experiment_or_of_one_not_being_deleted_changes_nothing() -> None:
    gc = Gc().given(ev.TensorboardFilesDeleted(experiment_id=7, delete_request=1, error="x"))
    assert gc.state.experiments == {} and gc.decide() == []
    gc = trained().given(ended())
    before = gc.state
    gc.given(ev.TensorboardFilesDeleted(experiment_id=1, delete_request=0, error="x"))
    gc.given(ev.TensorboardFilesDeleted(experiment_id=1, delete_request=1, error="x"))
    assert gc.state == before


def test_a_log_from_before_tensorboard_outcomes_still_deletes_the_experiment() -> None:
    """Written before TensorboardFilesDeleted existed: the request answered without one."""
    gc = trained().given(ended(), delete_requested())
    gc.deletions()
    gc.outcomes(partial={"b": "denied"})
    gc.given(ev.ExperimentDeleteFailed(experiment_id=1, reason="1 checkpoint(s) could not be deleted"))
    assert gc.decide() == [] and not gc.state.experiments[1].tensorboards_due
    gc.given(delete_requested())
    gc.deletion()
    gc.outcomes()
    gc.given(ev.ExperimentDeleted(experiment_id=1))
    assert gc.state.experiments == {} and gc.state.deletes_due == frozenset()
    assert gc.decide() == []


def test_a_new_policy_does_not_run_while_the_experiment_is_being_deleted() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.given(policy(0, 0, 0))
    assert gc.decide() == []


# -- validations and metrics ------------------------------------------------------------


@pytest.mark.parametrize(
    "value, metric",
    [
        (0.25, 0.25),
        (3, 3.0),
        ("Infinity", float("inf")),
        ("-Infinity", float("-inf")),
        (None, None),
        ("x", None),
        (True, None),
    ],
)
def test_the_searcher_metric_is_read_from_the_validation(value: object, metric: float | None) -> None:
    gc = Gc().given(created(), validation(1, 100, value))
    assert gc.state.experiments[1].trials[1].validations[100].metric == metric


def test_a_missing_metric_is_no_metric() -> None:
    event = ev.TrialValidationReported(
        trial_id=1, experiment_id=1, steps_completed=100, metrics_json='{"acc": 1}'
    )
    gc = Gc().given(created(), event)
    assert gc.state.experiments[1].trials[1].validations[100].metric is None


def test_the_last_validation_at_a_step_is_the_one_that_counts() -> None:
    storage = {**STORAGE, "save_trial_latest": 0}
    gc = Gc().given(
        created(storage=storage),
        validation(1, 100, 0.1),
        checkpoint("a", 1, 100),
        validation(1, 200, 0.2),
        checkpoint("b", 1, 200),
        validation(1, 100, 0.9),  # a restarted trial validated step 100 again
        ended(),
    )
    assert list(gc.deletion().uuids) == ["a"]


def test_a_repeated_checkpoint_report_is_folded_once() -> None:
    gc = trained()
    before = gc.state.experiments
    gc.given(checkpoint("a", 1, 999))
    assert gc.state.experiments == before


def test_a_config_the_model_refuses_still_names_its_storage() -> None:
    config = {"searcher": {"name": "nonsense"}, "checkpoint_storage": STORAGE}
    gc = Gc().given(
        ev.ExperimentCreated(experiment_id=1, config_json=json.dumps(config)), checkpoint("a", 1, 1)
    )
    gc.given(checkpoint("b", 1, 2), ended())
    deletion = gc.deletion()
    assert list(deletion.uuids) == ["a"] and json.loads(deletion.storage_json) == STORAGE


# -- replay --------------------------------------------------------------------------


def replayed(gc: Gc) -> Gc:
    """A restarted service: the same log (same event ids) folded from the start."""
    again = Gc()
    for envelope in gc.envelopes:
        again.state = core.evolve(again.state, envelope)
        again.envelopes.append(envelope)
    return again


def test_replaying_the_log_rebuilds_the_state_and_decides_nothing_again() -> None:
    gc = trained().given(ended())
    gc.decide()
    gc.outcomes(partial={"a": "denied"})
    gc.given(policy(0, 0, 0))
    gc.decide()
    again = replayed(gc)
    assert again.state == gc.state
    assert again.decide() == []


def test_a_delete_request_without_a_tensorboard_outcome_in_the_log_awaits_it_after_a_restart() -> None:
    gc = trained().given(ended(), delete_requested())
    gc.decide()
    gc.outcomes()
    again = replayed(gc)
    assert again.state == gc.state and again.state.experiments[1].tensorboards_due
    [append] = again.tensorboards().decide()
    assert isinstance(append.payload, ev.ExperimentDeleted)


def test_a_service_killed_mid_gc_finds_exactly_the_unsettled_checkpoints() -> None:
    gc = trained().given(ended(), policy(0, 0, 0))
    gc.decide()
    gc.given(ev.CheckpointDeleted(uuid="b", experiment_id=1, trial_id=1, deletion_id=2))
    again = replayed(gc)
    assert again.decide() == []
    unsettled = {t.uuid for d in again.state.deleting.values() for t in again.state.unsettled(d)}
    assert unsettled == {"a", "c", "d", "e"}


def test_a_cause_folded_before_the_crash_is_decided_after_it() -> None:
    gc = trained().given(ended())
    again = replayed(gc)
    assert list(again.deletion().uuids) == ["a"]


def test_the_log_not_the_plan_says_what_is_being_deleted() -> None:
    """A decision recorded by other code (or an older policy) is what the
    checkpoints follow when replayed."""
    recorded = ev.CheckpointDeletionRequested(
        experiment_id=1, deletion_id=1, uuids=["c", "e"], reason="other code"
    )
    gc = trained().given(ended(), recorded)
    assert gc.decide() == []
    assert {c.uuid for c in gc.state.experiments[1].checkpoints() if c.status is Status.DELETING} == {
        "c",
        "e",
    }
    assert gc.state.experiments[1].next_deletion_id == 2


@pytest.mark.parametrize("config_json", ["", "{}", "not json", "[1]", '{"checkpoint_storage": 3}'])
def test_an_unreadable_config_has_no_storage_and_the_default_policy(config_json: str) -> None:
    gc = Gc().given(ev.ExperimentCreated(experiment_id=1, config_json=config_json))
    experiment = gc.state.experiments[1]
    assert experiment.storage_json == "" and experiment.policy.save_trial_latest == 1
