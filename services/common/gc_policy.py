"""Which checkpoints a GC policy deletes: Determined's rule (the checkpoint
storage's `save_experiment_best`, `save_trial_best`, `save_trial_latest`),
as a pure function shared by the checkpoint service and the gateway's
preview (`det experiment set gc-policy` without --yes).

Determined ranks an experiment's checkpoints three ways (SQL `rank()`, so
equal keys share a rank):
- experiment rank: by `sign * metric` ascending (sign = +1 when smaller is
  better), then by the matched validation's order; checkpoints without a
  metric last;
- trial rank: the same, within the checkpoint's trial;
- trial order rank: within the trial, by steps completed, latest first (our
  tie-break between two checkpoints at the same step: the later reported).
It deletes a checkpoint iff
`((experiment_rank > save_experiment_best and trial_rank > save_trial_best)
or metric is NULL) and trial_order_rank > save_trial_latest`: it keeps the
union of the experiment's best N, each trial's best N (both among
checkpoints with a metric) and each trial's latest N (whatever the metric).

A NaN metric is a metric (PostgreSQL's float8 'NaN' is not NULL): it ranks
after every number. Protected checkpoints (model versions, warm-start
sources) take no part in the ranking, as in Determined, and are never
returned.

Callers pass the checkpoints that still hold files and are not already
being deleted (the service's rule): a checkpoint deleted by hand no longer
counts as a trial's latest or best, so the policy keeps the next one.
"""

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from determined.common.expconf import CheckpointStorage

# A ranking key: compared as a tuple, smaller first.
RankKey = tuple[float, ...]


@dataclass(frozen=True)
class GcPolicy:
    save_experiment_best: int
    save_trial_best: int
    save_trial_latest: int


def policy_of(storage: CheckpointStorage | None) -> GcPolicy:
    """The policy a `checkpoint_storage` section gives; what it (or a config
    without one) leaves out is the config model's default."""
    section = storage or CheckpointStorage()
    return GcPolicy(section.save_experiment_best, section.save_trial_best, section.save_trial_latest)


@dataclass(frozen=True)
class CheckpointFacts:
    uuid: str
    trial_id: int
    steps_completed: int
    # The trial's validation at the same steps_completed (None: no validation,
    # or it lacks the searcher's metric).
    searcher_metric: float | None
    # Tie-break between equal metrics: the order that validation was reported (0 when none).
    validation_order: int
    # Tie-break for "latest" between equal steps: the order the checkpoint was reported.
    reported_order: int


def checkpoints_to_delete(
    checkpoints: Sequence[CheckpointFacts],
    policy: GcPolicy,
    *,
    smaller_is_better: bool,
    protected: AbstractSet[str],
) -> list[str]:
    """The uuids the policy deletes, in input order."""
    candidates = [c for c in checkpoints if c.uuid not in protected]
    sign = 1.0 if smaller_is_better else -1.0

    def by_metric(c: CheckpointFacts) -> RankKey:
        metric = c.searcher_metric
        assert metric is not None
        nan = math.isnan(metric)
        return float(nan), 0.0 if nan else sign * metric, c.validation_order

    def latest_first(c: CheckpointFacts) -> RankKey:
        return -c.steps_completed, -c.reported_order

    with_metric = [c for c in candidates if c.searcher_metric is not None]
    kept = _best(with_metric, by_metric, policy.save_experiment_best)
    for trial in _by_trial(candidates).values():
        trial_with_metric = [c for c in trial if c.searcher_metric is not None]
        kept |= _best(trial_with_metric, by_metric, policy.save_trial_best)
        kept |= _best(trial, latest_first, policy.save_trial_latest)
    return [c.uuid for c in candidates if c.uuid not in kept]


def _best(
    checkpoints: Iterable[CheckpointFacts], key: Callable[[CheckpointFacts], RankKey], keep: int
) -> set[str]:
    """The uuids ranked `keep` or better by `key` ascending, with SQL rank()
    semantics: a checkpoint's rank is one more than the number strictly
    before it, so equal keys share a rank."""
    ordered = sorted(checkpoints, key=key)
    kept: set[str] = set()
    rank = 0
    previous: RankKey | None = None
    for position, checkpoint in enumerate(ordered, start=1):
        current = key(checkpoint)
        if current != previous:
            rank, previous = position, current
        if rank > keep:
            break
        kept.add(checkpoint.uuid)
    return kept


def _by_trial(checkpoints: Iterable[CheckpointFacts]) -> dict[int, list[CheckpointFacts]]:
    trials: dict[int, list[CheckpointFacts]] = defaultdict(list)
    for checkpoint in checkpoints:
        trials[checkpoint.trial_id].append(checkpoint)
    return trials
