"""The checkpoint service's pure core: which checkpoints to delete, and when
an experiment being deleted is gone.

The saga (events.proto): a cause -> CheckpointDeletionRequested (this core)
-> the shell deletes the files -> CheckpointDeleted or
CheckpointPartiallyDeleted per checkpoint (the shell, services/checkpoint/
deleter.py) -> for `det experiment delete`, ExperimentDeleted or
ExperimentDeleteFailed (this core) once every checkpoint is settled and the
shell has recorded what deleting the experiment's TensorBoard files left
(TensorboardFilesDeleted, once per ExperimentDeleteRequested).

The causes, and what each deletes:
- the experiment reaches COMPLETED, CANCELED or ERROR: what its GC policy
  does not keep (services/common/gc_policy.py);
- its GC policy changes (`det experiment set gc-policy`): the same, at once
  when it has ended (else when it ends), with the new policy;
- a user or a trial asks (CheckpointDeleteAsked): those checkpoints, or only
  their files matching the globs;
- `det experiment delete`: every checkpoint (policy 0/0/0), and the
  experiment's TensorBoard files (the shell deletes those without a decision
  of this core: the request is the cause). A log written before
  TensorboardFilesDeleted existed has ExperimentDeleteRequested answered
  without one: the answer folds as ever, and nothing waits for it.

A deletion is planned when its cause is folded (so that a replay plans the
same one, with the same deletion id) and waits in the state until decided;
it never names a checkpoint already DELETING or DELETED, or a protected one
(a model version or a warm-start source, never deleted by anything here: the
experiment being deleted keeps them and is still deleted). A PARTIALLY_DELETED
checkpoint may be named again: that is how a deletion the storage refused is
retried (`det experiment delete` after DELETE_FAILED, a new GC policy).
"""

import json
import math
from collections.abc import Iterable
from dataclasses import replace

from determined.common import states
from determined.common.expconf import ExperimentConfig, InvalidConfigError
from determined.proto import events_pb2
from services.checkpoint.state import (
    Checkpoint,
    Deletion,
    Experiment,
    GcState,
    Status,
    Target,
    Trial,
    Validation,
    with_checkpoint,
    with_experiment,
    with_trial,
)
from services.common.config import experiment_config
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, aggregate, payload_of
from services.common.gc_policy import CheckpointFacts, GcPolicy, checkpoints_to_delete, policy_of

TERMINAL_STATES = states.proto_values(states.ExperimentState, states.TERMINAL_STATES)
# Deletion reasons (CheckpointDeletionRequested.reason).
EXPERIMENT_ENDED = "experiment ended"
POLICY_CHANGED = "gc policy changed"
EXPERIMENT_DELETED = "experiment deleted"
# How many left-behind checkpoints an ExperimentDeleteFailed reason names.
REASON_NAMES = 5

GC_FOLDS = (
    "experiment_created",
    "experiment_state_changed",
    "trial_validation_reported",
    "checkpoint_reported",
    "checkpoint_gc_policy_changed",
    "checkpoint_delete_asked",
    "experiment_delete_requested",
    "model_version_registered",
    "checkpoint_deletion_requested",
    "checkpoint_deleted",
    "checkpoint_partially_deleted",
    "tensorboard_files_deleted",
    "experiment_deleted",
    "experiment_delete_failed",
)


class GcCore(PureCore[GcState]):
    def __init__(self) -> None:
        super().__init__(GC_FOLDS, GcState, evolve, decide)


# -- evolve -----------------------------------------------------------------------


def evolve(state: GcState, envelope: Envelope) -> GcState:
    event = payload_of(envelope)
    match event:
        case events_pb2.ExperimentCreated():
            return _created(state, event)
        case events_pb2.ModelVersionRegistered():
            return replace(state, protected=state.protected | {event.checkpoint_uuid})
        case events_pb2.CheckpointDeletionRequested():
            return _deletion_requested(state, event, envelope)
        case events_pb2.CheckpointDeleted():
            return _settled(state, event.experiment_id, event.trial_id, event.uuid, Status.DELETED, {}, "")
        case events_pb2.CheckpointPartiallyDeleted():
            remaining = dict(event.remaining)
            status = Status.PARTIALLY_DELETED
            return _settled(
                state, event.experiment_id, event.trial_id, event.uuid, status, remaining, event.error
            )
    experiment_id = getattr(event, "experiment_id", None)
    experiment = state.experiments.get(experiment_id) if isinstance(experiment_id, int) else None
    if experiment is None:
        return state
    match event:
        case events_pb2.ExperimentStateChanged():
            return _state_changed(state, experiment, event.state)
        case events_pb2.TrialValidationReported():
            return _validation_reported(state, experiment, event)
        case events_pb2.CheckpointReported():
            return _checkpoint_reported(state, experiment, event)
        case events_pb2.CheckpointGcPolicyChanged():
            return _policy_changed(state, experiment, event)
        case events_pb2.CheckpointDeleteAsked():
            return _delete_asked(state, experiment, event)
        case events_pb2.ExperimentDeleteRequested():
            return _delete_requested(state, experiment, envelope)
        case events_pb2.TensorboardFilesDeleted():
            return _tensorboards_deleted(state, experiment, event)
        case events_pb2.ExperimentDeleted():
            experiments = {k: v for k, v in state.experiments.items() if k != experiment_id}
            return replace(state, experiments=experiments, deletes_due=state.deletes_due - {experiment_id})
        case events_pb2.ExperimentDeleteFailed():
            return with_experiment(state, replace(experiment, delete_answered=experiment.delete_requests))
    return state


def _created(state: GcState, event: events_pb2.ExperimentCreated) -> GcState:
    if event.experiment_id in state.experiments:
        return state
    try:
        config: ExperimentConfig | None = experiment_config(event.config_json)
    except (InvalidConfigError, ValueError):
        config = None  # the searcher ends it ERROR; what it stored can still be deleted
    experiment = _experiment(event.experiment_id, event.config_json, config)
    state = with_experiment(state, experiment)
    source = event.source_trial_checkpoint_uuid or _warm_start_source(state, config)
    return state if source is None else replace(state, protected=state.protected | {source})


def _experiment(experiment_id: int, config_json: str, config: ExperimentConfig | None) -> Experiment:
    if config is None:
        return Experiment(experiment_id, _raw_storage_json(config_json), None, True, policy_of(None))
    storage = config.checkpoint_storage
    return Experiment(
        experiment_id,
        "" if storage is None else json.dumps(storage.to_json(), sort_keys=True),
        config.searcher.metric,
        config.searcher.smaller_is_better,
        policy_of(storage),
    )


def _raw_storage_json(config_json: str) -> str:
    """The checkpoint_storage section of a config the model refuses, as it was stored."""
    try:
        raw = json.loads(config_json or "{}")
    except ValueError:
        return ""
    section = raw.get("checkpoint_storage") if isinstance(raw, dict) else None
    return json.dumps(section, sort_keys=True) if isinstance(section, dict) else ""


def _warm_start_source(state: GcState, config: ExperimentConfig | None) -> str | None:
    """The checkpoint the experiment's trials start from: the searcher's
    source_checkpoint_uuid, or the source trial's latest checkpoint now (for a log written
    before ExperimentCreated recorded it, source_trial_checkpoint_uuid)."""
    if config is None:
        return None
    if config.searcher.source_checkpoint_uuid:
        return config.searcher.source_checkpoint_uuid
    trial_id = config.searcher.source_trial_id
    if trial_id is None:
        return None
    trials = (e.trials[trial_id] for e in state.experiments.values() if trial_id in e.trials)
    kept = [c for trial in trials for c in trial.checkpoints.values() if c.status is not Status.DELETED]
    latest = max(kept, key=lambda c: (c.steps_completed, c.reported_order), default=None)
    return None if latest is None else latest.uuid


def _state_changed(state: GcState, experiment: Experiment, new_state: int) -> GcState:
    ended = new_state in TERMINAL_STATES
    state = with_experiment(state, replace(experiment, ended=ended))
    if ended and not experiment.ended:
        return _collect(state, state.experiments[experiment.experiment_id], EXPERIMENT_ENDED)
    return state


def _validation_reported(
    state: GcState, experiment: Experiment, event: events_pb2.TrialValidationReported
) -> GcState:
    order = state.reports + 1
    trial = experiment.trials.get(event.trial_id) or Trial(event.trial_id)
    validation = Validation(_searcher_metric(event.metrics_json, experiment.metric), order)
    trial = replace(trial, validations={**trial.validations, event.steps_completed: validation})
    return replace(with_experiment(state, with_trial(experiment, trial)), reports=order)


# The gateway stores NaN and the infinities as these strings (PostgreSQL's jsonb refuses them).
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _searcher_metric(metrics_json: str, metric: str | None) -> float | None:
    if metric is None:
        return None
    try:
        value = json.loads(metrics_json or "{}").get(metric)
    except (ValueError, AttributeError):
        return None
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _checkpoint_reported(
    state: GcState, experiment: Experiment, event: events_pb2.CheckpointReported
) -> GcState:
    trial = experiment.trials.get(event.trial_id) or Trial(event.trial_id)
    if event.uuid in trial.checkpoints:
        return state
    order = state.reports + 1
    checkpoint = Checkpoint(event.uuid, event.trial_id, event.steps_completed, order, dict(event.resources))
    experiment = with_trial(experiment, with_checkpoint(trial, checkpoint))
    return replace(with_experiment(state, experiment), reports=order)


def _policy_changed(
    state: GcState, experiment: Experiment, event: events_pb2.CheckpointGcPolicyChanged
) -> GcState:
    policy = GcPolicy(event.save_experiment_best, event.save_trial_best, event.save_trial_latest)
    experiment = replace(experiment, policy=policy)
    state = with_experiment(state, experiment)
    if not experiment.ended or experiment.being_deleted:
        return state
    return _collect(state, experiment, POLICY_CHANGED)


def _delete_asked(state: GcState, experiment: Experiment, event: events_pb2.CheckpointDeleteAsked) -> GcState:
    planned = _planned(state, experiment)
    chosen = [
        c
        for c in experiment.named(event.uuids)
        if _holds_files(c) and c.uuid not in planned and c.uuid not in state.protected
    ]
    return _plan(state, experiment, chosen, tuple(event.globs), f"asked by {event.asked_by}")


def _delete_requested(state: GcState, experiment: Experiment, envelope: Envelope) -> GcState:
    experiment = replace(
        experiment,
        delete_requests=experiment.delete_requests + 1,
        delete_event_id=envelope.event_id,
        delete_correlation_id=envelope.correlation_id,
    )
    state = with_experiment(state, experiment)
    chosen = [c for c in _candidates(state, experiment) if c.uuid not in state.protected]
    return _plan(state, experiment, chosen, (), EXPERIMENT_DELETED)


def _tensorboards_deleted(
    state: GcState, experiment: Experiment, event: events_pb2.TensorboardFilesDeleted
) -> GcState:
    """What deleting its TensorBoard files left; only an outcome of the request
    being answered counts (a late one of an older request changes nothing)."""
    if event.delete_request != experiment.delete_requests or not experiment.being_deleted:
        return state
    experiment = replace(
        experiment,
        tensorboards_answered=event.delete_request,
        tensorboard_remaining=dict(event.remaining),
        tensorboard_error=event.error,
    )
    return with_experiment(state, experiment)


def _collect(state: GcState, experiment: Experiment, reason: str) -> GcState:
    """Plans deleting what the experiment's policy does not keep."""
    candidates = _candidates(state, experiment)
    facts = [_facts(experiment, c) for c in candidates]
    doomed = set(
        checkpoints_to_delete(
            facts,
            experiment.policy,
            smaller_is_better=experiment.smaller_is_better,
            protected=state.protected,
        )
    )
    return _plan(state, experiment, [c for c in candidates if c.uuid in doomed], (), reason)


def _candidates(state: GcState, experiment: Experiment) -> list[Checkpoint]:
    """The experiment's checkpoints that still hold files and that no
    deletion, decided or running, holds."""
    planned = _planned(state, experiment)
    return [c for c in experiment.checkpoints() if _holds_files(c) and c.uuid not in planned]


def _holds_files(checkpoint: Checkpoint) -> bool:
    """Not deleted, nor being deleted."""
    return checkpoint.status in states.CHECKPOINT_DELETABLE_STATES


def _planned(state: GcState, experiment: Experiment) -> set[str]:
    """The checkpoints of deletions decided and not yet in the log."""
    return {
        target.uuid
        for deletion in state.pending.values()
        if deletion.experiment_id == experiment.experiment_id
        for target in deletion.targets
    }


def _facts(experiment: Experiment, checkpoint: Checkpoint) -> CheckpointFacts:
    validation = experiment.trials[checkpoint.trial_id].validations.get(checkpoint.steps_completed)
    return CheckpointFacts(
        uuid=checkpoint.uuid,
        trial_id=checkpoint.trial_id,
        steps_completed=checkpoint.steps_completed,
        searcher_metric=None if validation is None else validation.metric,
        validation_order=0 if validation is None else validation.order,
        reported_order=checkpoint.reported_order,
    )


def _plan(
    state: GcState, experiment: Experiment, chosen: Iterable[Checkpoint], globs: tuple[str, ...], reason: str
) -> GcState:
    """A deletion of the chosen checkpoints, waiting to be decided (none when
    nothing is chosen)."""
    targets = tuple(Target(c.uuid, c.trial_id, c.resources) for c in chosen)
    if not targets:
        return state
    deletion_id = experiment.next_deletion_id
    deletion = Deletion(
        experiment.experiment_id, deletion_id, targets, globs, reason, experiment.storage_json
    )
    state = with_experiment(state, replace(experiment, next_deletion_id=deletion_id + 1))
    return replace(state, pending={**state.pending, deletion.key: deletion})


def _deletion_requested(
    state: GcState, event: events_pb2.CheckpointDeletionRequested, envelope: Envelope
) -> GcState:
    """The decision is in the log: its checkpoints are DELETING under it. The
    log, not the plan, says which (a plan made by other code may differ)."""
    key = (event.experiment_id, event.deletion_id)
    state = replace(state, pending={k: v for k, v in state.pending.items() if k != key})
    experiment = state.experiments.get(event.experiment_id)
    if experiment is None or key in state.deleting:
        return state
    chosen = [c for c in experiment.named(event.uuids) if c.status is not Status.DELETED]
    for checkpoint in chosen:
        state = _release(state, event.experiment_id, checkpoint)
    deleting = {c.uuid: replace(c, status=Status.DELETING, deletion_id=event.deletion_id) for c in chosen}
    for trial_id in dict.fromkeys(c.trial_id for c in chosen):
        trial = experiment.trials[trial_id]
        updated = {uuid: deleting.get(uuid, c) for uuid, c in trial.checkpoints.items()}
        experiment = with_trial(experiment, replace(trial, checkpoints=updated))
    targets = [Target(c.uuid, c.trial_id, c.resources) for c in chosen]
    experiment = replace(experiment, next_deletion_id=max(experiment.next_deletion_id, event.deletion_id + 1))
    state = with_experiment(state, experiment)
    if not targets:
        return state
    deletion = Deletion(
        event.experiment_id,
        event.deletion_id,
        tuple(targets),
        tuple(event.globs),
        event.reason,
        event.storage_json,
        outcomes_awaited=len(targets),
        event_id=envelope.event_id,
        correlation_id=envelope.correlation_id,
    )
    return replace(state, deleting={**state.deleting, key: deletion})


def _release(state: GcState, experiment_id: int, checkpoint: Checkpoint) -> GcState:
    """The running deletion that holds the checkpoint no longer waits for it
    (its outcome was recorded, or another deletion took it over)."""
    key = (experiment_id, checkpoint.deletion_id)
    deletion = state.deleting.get(key) if checkpoint.status is Status.DELETING else None
    if deletion is None:
        return state
    deleting = {k: v for k, v in state.deleting.items() if k != key}
    if deletion.outcomes_awaited > 1:
        deleting[key] = replace(deletion, outcomes_awaited=deletion.outcomes_awaited - 1)
    return replace(state, deleting=deleting)


def _settled(
    state: GcState,
    experiment_id: int,
    trial_id: int,
    uuid: str,
    status: Status,
    remaining: dict[str, int],
    error: str,
) -> GcState:
    """A checkpoint's deletion outcome: what is left of it, and why."""
    experiment = state.experiments.get(experiment_id)
    checkpoint = None if experiment is None else experiment.checkpoint(trial_id, uuid)
    if experiment is None or checkpoint is None or checkpoint.status is Status.DELETED:
        return state
    state = _release(state, experiment_id, checkpoint)
    settled = replace(checkpoint, status=status, resources=remaining, error=error, deletion_id=0)
    experiment = with_trial(experiment, with_checkpoint(experiment.trials[trial_id], settled))
    return with_experiment(state, experiment)


# -- decide -----------------------------------------------------------------------


def decide(state: GcState) -> list[Append]:
    appends = [_deletion_requested_append(deletion) for deletion in state.pending.values()]
    for experiment_id in sorted(state.deletes_due):
        experiment = state.experiments[experiment_id]
        if not state.has_deletions(experiment_id) and not experiment.tensorboards_due:
            appends.append(_delete_answer(state, experiment))
    return appends


def _deletion_requested_append(deletion: Deletion) -> Append:
    event = events_pb2.CheckpointDeletionRequested(
        experiment_id=deletion.experiment_id,
        deletion_id=deletion.deletion_id,
        uuids=[target.uuid for target in deletion.targets],
        globs=deletion.globs,
        reason=deletion.reason,
        storage_json=deletion.storage_json,
        bytes=deletion.bytes,
    )
    msg_id = f"gc-{deletion.experiment_id}-{deletion.deletion_id}"
    return Append(aggregate("experiment", deletion.experiment_id), event, msg_id)


def _delete_answer(state: GcState, experiment: Experiment) -> Append:
    """ExperimentDeleted when nothing of it is left in storage (but the
    protected checkpoints it keeps), else ExperimentDeleteFailed naming what is."""
    experiment_id = experiment.experiment_id
    left = [
        c
        for c in experiment.checkpoints()
        if c.status is not Status.DELETED and c.uuid not in state.protected
    ]
    if not left and not experiment.tensorboards_left:
        event = events_pb2.ExperimentDeleted(experiment_id=experiment_id)
        return Append(aggregate("experiment", experiment_id), event, f"experiment-deleted-{experiment_id}")
    reasons = [_checkpoints_left(left)] if left else []
    if experiment.tensorboards_left:
        reasons.append(f"tensorboard files: {experiment.tensorboard_error or 'files are left'}")
    failed = events_pb2.ExperimentDeleteFailed(experiment_id=experiment_id, reason="; ".join(reasons))
    msg_id = f"experiment-delete-failed-{experiment_id}-{experiment.delete_requests}"
    return Append(aggregate("experiment", experiment_id), failed, msg_id)


def _checkpoints_left(left: list[Checkpoint]) -> str:
    named = "; ".join(f"{c.uuid}: {c.error or 'files are left'}" for c in left[:REASON_NAMES])
    more = f" (and {len(left) - REASON_NAMES} more)" if len(left) > REASON_NAMES else ""
    return f"{len(left)} checkpoint(s) could not be deleted: {named}{more}"
