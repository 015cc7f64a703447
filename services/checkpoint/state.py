"""What the checkpoint service knows: each experiment's checkpoints (grouped
by trial, with the trial's validations), its GC policy and storage, its
delete requests and what deleting its TensorBoard files left, and the
deletions decided but not yet settled.

Kept cheap to update: an event copies only the trial it touches, the
experiment's dict of trials and the dict of experiments (shallow copies), so
an experiment of 10,000 checkpoints in 100 trials folds each report and each
deletion outcome in microseconds rather than copying every checkpoint.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from determined.common.states import CheckpointState
from services.common.gc_policy import GcPolicy

# A checkpoint's state, as the API names it (DELETING: named by a
# CheckpointDeletionRequested whose outcome is not recorded yet).
Status = CheckpointState


@dataclass(frozen=True)
class Checkpoint:
    uuid: str
    trial_id: int
    steps_completed: int
    # When it was reported, among every checkpoint and validation folded.
    reported_order: int
    # Relative path -> size in bytes of what is in storage now.
    resources: dict[str, int]
    status: Status = Status.COMPLETED
    # The deletion that holds it while DELETING.
    deletion_id: int = 0
    # The storage's error when it refused to delete some files.
    error: str = ""

    @property
    def bytes(self) -> int:
        return sum(self.resources.values())


@dataclass(frozen=True)
class Validation:
    # The searcher's metric (None: the report lacks it, or it is not a number).
    metric: float | None
    order: int


@dataclass(frozen=True)
class Trial:
    trial_id: int
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    # Steps completed -> the trial's last validation reported at that step.
    validations: dict[int, Validation] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """One checkpoint a deletion deletes."""

    uuid: str
    trial_id: int
    # Its recorded files when the deletion was decided: relative path -> size.
    resources: dict[str, int]

    @property
    def bytes(self) -> int:
        return sum(self.resources.values())


@dataclass(frozen=True)
class Deletion:
    """A decision to delete checkpoints from one storage."""

    experiment_id: int
    deletion_id: int
    targets: tuple[Target, ...]
    globs: tuple[str, ...]
    reason: str
    storage_json: str
    # Targets whose outcome is not recorded yet (once the decision is in the log).
    outcomes_awaited: int = 0
    # The decision's event id and correlation id once in the log: each outcome answers it.
    event_id: str = ""
    correlation_id: str = ""

    @property
    def key(self) -> tuple[int, int]:
        return self.experiment_id, self.deletion_id

    @property
    def bytes(self) -> int:
        return sum(target.bytes for target in self.targets)


@dataclass(frozen=True)
class Experiment:
    experiment_id: int
    # The checkpoint_storage section as JSON ("" when the stored config has none).
    storage_json: str
    metric: str | None
    smaller_is_better: bool
    policy: GcPolicy
    # In a terminal state (COMPLETED, CANCELED, ERROR): its policy applies at once.
    ended: bool = False
    trials: dict[int, Trial] = field(default_factory=dict)
    next_deletion_id: int = 1
    # `det experiment delete` requests so far, and how many were answered
    # (ExperimentDeleted / ExperimentDeleteFailed).
    delete_requests: int = 0
    delete_answered: int = 0
    # The last ExperimentDeleteRequested's event id and correlation id: what
    # its TensorboardFilesDeleted answers.
    delete_event_id: str = ""
    delete_correlation_id: str = ""
    # The delete request whose TensorBoard files outcome was folded last, and
    # what that outcome left: relative path -> size, and the storage's error.
    tensorboards_answered: int = 0
    tensorboard_remaining: dict[str, int] = field(default_factory=dict)
    tensorboard_error: str = ""

    @property
    def being_deleted(self) -> bool:
        return self.delete_requests > self.delete_answered

    @property
    def tensorboards_due(self) -> bool:
        """Being deleted, and its TensorBoard files outcome for this request not in yet."""
        return self.being_deleted and self.tensorboards_answered < self.delete_requests

    @property
    def tensorboards_left(self) -> bool:
        """The last TensorBoard files outcome left files, or the storage failed."""
        return bool(self.tensorboard_remaining or self.tensorboard_error)

    def checkpoints(self) -> list[Checkpoint]:
        return [c for trial in self.trials.values() for c in trial.checkpoints.values()]

    def named(self, uuids: Iterable[str]) -> list[Checkpoint]:
        """Its checkpoints among `uuids`, in their order (looked up trial by
        trial: a few uuids cost a few lookups per trial, not a walk over all)."""
        wanted = list(dict.fromkeys(uuids))
        looked_for = set(wanted)
        found: dict[str, Checkpoint] = {}
        for trial in self.trials.values():
            for uuid in trial.checkpoints.keys() & looked_for:
                found[uuid] = trial.checkpoints[uuid]
        return [found[uuid] for uuid in wanted if uuid in found]

    def checkpoint(self, trial_id: int, uuid: str) -> Checkpoint | None:
        trial = self.trials.get(trial_id)
        return None if trial is None else trial.checkpoints.get(uuid)


@dataclass(frozen=True)
class GcState:
    # Experiments until ExperimentDeleted: then they leave.
    experiments: dict[int, Experiment] = field(default_factory=dict)
    # Checkpoints never deleted: model versions and warm-start sources.
    protected: frozenset[str] = frozenset()
    # Decided, not yet in the log; (experiment id, deletion id) -> deletion.
    pending: dict[tuple[int, int], Deletion] = field(default_factory=dict)
    # In the log, with outcomes still to record (what the shell works on).
    deleting: dict[tuple[int, int], Deletion] = field(default_factory=dict)
    # Experiments whose delete request awaits its answer.
    deletes_due: frozenset[int] = frozenset()
    # Checkpoints and validations folded so far (their reported order).
    reports: int = 0

    def has_deletions(self, experiment_id: int) -> bool:
        """Whether a deletion of the experiment is decided or running."""
        return any(key[0] == experiment_id for key in (*self.pending, *self.deleting))

    def unsettled(self, deletion: Deletion) -> list[Target]:
        """The deletion's targets still DELETING under it."""
        experiment = self.experiments.get(deletion.experiment_id)
        if experiment is None:
            return []
        return [
            target
            for target in deletion.targets
            if (checkpoint := experiment.checkpoint(target.trial_id, target.uuid)) is not None
            and checkpoint.status is Status.DELETING
            and checkpoint.deletion_id == deletion.deletion_id
        ]


def with_experiment(state: GcState, experiment: Experiment) -> GcState:
    experiments = {**state.experiments, experiment.experiment_id: experiment}
    due = state.deletes_due | {experiment.experiment_id}
    if not experiment.being_deleted:
        due -= {experiment.experiment_id}
    return replace(state, experiments=experiments, deletes_due=due)


def with_trial(experiment: Experiment, trial: Trial) -> Experiment:
    return replace(experiment, trials={**experiment.trials, trial.trial_id: trial})


def with_checkpoint(trial: Trial, checkpoint: Checkpoint) -> Trial:
    return replace(trial, checkpoints={**trial.checkpoints, checkpoint.uuid: checkpoint})
