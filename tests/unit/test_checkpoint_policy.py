"""Which checkpoints a GC policy deletes (services/common/gc_policy.py):
the table of Determined's experiment config reference, the SQL it runs
(ranks written out literally), and properties any policy must keep."""

import math
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.gc_policy import CheckpointFacts, GcPolicy, checkpoints_to_delete

# The docs' experiment (smaller is better): (trial, checkpoint, validation metric),
# checkpoints numbered in the order they were taken.
DOCS_CHECKPOINTS = [
    (1, 1, None),
    (1, 2, None),
    (1, 3, 0.6),
    (1, 4, 0.5),
    (1, 5, 0.4),
    (2, 6, None),
    (2, 7, 0.2),
    (2, 8, 0.3),
    (2, 9, None),
    (2, 10, None),
]
# (save_experiment_best, save_trial_best, save_trial_latest) -> the checkpoints saved.
DOCS_TABLE = [
    ((0, 0, 0), set()),
    ((2, 0, 0), {8, 7}),
    ((5, 0, 0), {8, 7, 5, 4, 3}),
    ((9, 0, 0), {8, 7, 5, 4, 3}),
    ((0, 1, 0), {7, 5}),
    ((0, 3, 0), {8, 7, 5, 4, 3}),
    ((0, 7, 0), {8, 7, 5, 4, 3}),
    ((0, 0, 1), {10, 5}),
    ((0, 0, 3), {10, 9, 8, 5, 4, 3}),
    ((2, 1, 0), {8, 7, 5}),
    ((2, 0, 1), {10, 8, 7, 5}),
    ((0, 1, 1), {10, 7, 5}),
    ((2, 1, 1), {10, 8, 7, 5}),
]


def docs_facts() -> list[CheckpointFacts]:
    return [
        CheckpointFacts(
            uuid=str(number),
            trial_id=trial,
            steps_completed=number * 100,
            searcher_metric=metric,
            validation_order=number if metric is not None else 0,
            reported_order=number,
        )
        for trial, number, metric in DOCS_CHECKPOINTS
    ]


def kept(checkpoints: Sequence[CheckpointFacts], deleted: list[str]) -> set[str]:
    return {c.uuid for c in checkpoints} - set(deleted)


@pytest.mark.parametrize("policy, saved", DOCS_TABLE, ids=lambda v: str(v))
def test_the_docs_table(policy: tuple[int, int, int], saved: set[int]) -> None:
    checkpoints = docs_facts()
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(*policy), smaller_is_better=True, protected=set())
    assert kept(checkpoints, deleted) == {str(n) for n in saved}


def test_deleted_uuids_come_in_input_order() -> None:
    checkpoints = docs_facts()[::-1]
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(0, 0, 0), smaller_is_better=True, protected=set())
    assert deleted == [c.uuid for c in checkpoints]


def test_larger_is_better_flips_the_ranking() -> None:
    checkpoints = docs_facts()
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(2, 1, 0), smaller_is_better=False, protected=set())
    # Best overall: 3 (0.6), 4 (0.5); best of trial 2: 8 (0.3).
    assert kept(checkpoints, deleted) == {"3", "4", "8"}


def test_protected_checkpoints_are_kept_and_not_ranked() -> None:
    checkpoints = docs_facts()
    deleted = checkpoints_to_delete(
        checkpoints, GcPolicy(0, 1, 1), smaller_is_better=True, protected={"7", "2"}
    )
    # Without 7, trial 2's best is 8; 7 and 2 stay whatever the policy says.
    assert kept(checkpoints, deleted) == {"10", "8", "7", "5", "2"}


def test_a_nan_metric_ranks_after_every_number_but_is_a_metric() -> None:
    checkpoints = [
        CheckpointFacts("nan", 1, 100, math.nan, 1, 1),
        CheckpointFacts("worse", 1, 200, 9.0, 2, 2),
        CheckpointFacts("latest", 1, 300, None, 0, 3),
    ]
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(0, 2, 0), smaller_is_better=True, protected=set())
    assert kept(checkpoints, deleted) == {"worse", "nan"}
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(0, 1, 0), smaller_is_better=True, protected=set())
    assert kept(checkpoints, deleted) == {"worse"}


def test_latest_ties_on_steps_go_to_the_later_reported() -> None:
    checkpoints = [CheckpointFacts("first", 1, 100, None, 0, 1), CheckpointFacts("again", 1, 100, None, 0, 2)]
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(0, 0, 1), smaller_is_better=True, protected=set())
    assert deleted == ["first"]


def test_checkpoints_sharing_a_validation_share_its_rank() -> None:
    """SQL rank(): equal (metric, validation) keys tie, and both are kept."""
    checkpoints = [
        CheckpointFacts("a", 1, 100, 0.5, 1, 1),
        CheckpointFacts("b", 1, 100, 0.5, 1, 2),
        CheckpointFacts("c", 1, 200, 0.7, 2, 3),
    ]
    deleted = checkpoints_to_delete(checkpoints, GcPolicy(0, 1, 0), smaller_is_better=True, protected=set())
    assert deleted == ["c"]


# -- properties -----------------------------------------------------------------------

metrics = st.one_of(st.none(), st.floats(-10, 10), st.just(math.nan), st.sampled_from([0.5, 1.0]))


@st.composite
def experiments(draw: st.DrawFn) -> list[CheckpointFacts]:
    """Checkpoints of a few trials; validations at some of their steps (a
    validation's order follows its steps, as when reported)."""
    rows = draw(
        st.lists(
            st.tuples(st.integers(1, 4), st.integers(1, 12), metrics), max_size=30, unique_by=lambda r: r[:2]
        )
    )
    return [
        CheckpointFacts(
            uuid=f"t{trial}s{steps}",
            trial_id=trial,
            steps_completed=steps * 10,
            searcher_metric=metric,
            validation_order=0 if metric is None else steps * 10 + trial,
            reported_order=n,
        )
        for n, (trial, steps, metric) in enumerate(rows, start=1)
    ]


Key = tuple[float, ...]
policies = st.builds(GcPolicy, st.integers(0, 4), st.integers(0, 4), st.integers(0, 4))


def sql_reference(
    checkpoints: Sequence[CheckpointFacts], policy: GcPolicy, smaller_is_better: bool
) -> set[str]:
    """§3.2 written out: three rank() columns and the WHERE clause, over the
    unprotected checkpoints, NULL metrics last, NaN after every number."""
    sign = 1.0 if smaller_is_better else -1.0

    def metric_key(c: CheckpointFacts) -> tuple[float, float, int]:
        m = c.searcher_metric
        if m is None:
            return 2.0, 0.0, 0
        return (1.0, 0.0, c.validation_order) if math.isnan(m) else (0.0, sign * m, c.validation_order)

    def rank(
        c: CheckpointFacts, among: Sequence[CheckpointFacts], key: Callable[[CheckpointFacts], Key]
    ) -> int:
        return 1 + sum(1 for other in among if key(other) < key(c))

    def order_key(c: CheckpointFacts) -> tuple[int, int]:
        return -c.steps_completed, -c.reported_order

    deleted = set()
    for c in checkpoints:
        trial = [o for o in checkpoints if o.trial_id == c.trial_id]
        experiment_rank = rank(c, checkpoints, metric_key)
        trial_rank = rank(c, trial, metric_key)
        trial_order_rank = rank(c, trial, order_key)
        by_metric = experiment_rank > policy.save_experiment_best and trial_rank > policy.save_trial_best
        if (by_metric or c.searcher_metric is None) and trial_order_rank > policy.save_trial_latest:
            deleted.add(c.uuid)
    return deleted


@given(experiments(), policies, st.booleans())
def test_it_is_the_sql_of_determined(
    checkpoints: list[CheckpointFacts], policy: GcPolicy, smaller_is_better: bool
) -> None:
    deleted = checkpoints_to_delete(checkpoints, policy, smaller_is_better=smaller_is_better, protected=set())
    assert set(deleted) == sql_reference(checkpoints, policy, smaller_is_better)


@given(experiments(), policies, st.booleans())
def test_a_trial_keeps_its_latest_checkpoint(
    checkpoints: list[CheckpointFacts], policy: GcPolicy, smaller_is_better: bool
) -> None:
    policy = GcPolicy(policy.save_experiment_best, policy.save_trial_best, max(1, policy.save_trial_latest))
    deleted = set(
        checkpoints_to_delete(checkpoints, policy, smaller_is_better=smaller_is_better, protected=set())
    )
    for trial_id in {c.trial_id for c in checkpoints}:
        latest = max((c for c in checkpoints if c.trial_id == trial_id), key=lambda c: c.steps_completed)
        assert latest.uuid not in deleted


@given(experiments(), policies, st.booleans(), st.data())
def test_applying_a_policy_twice_deletes_nothing_the_second_time(
    checkpoints: list[CheckpointFacts], policy: GcPolicy, smaller_is_better: bool, data: st.DataObject
) -> None:
    protected = data.draw(st.sets(st.sampled_from([c.uuid for c in checkpoints]))) if checkpoints else set()
    deleted = set(
        checkpoints_to_delete(checkpoints, policy, smaller_is_better=smaller_is_better, protected=protected)
    )
    left = [c for c in checkpoints if c.uuid not in deleted]
    assert checkpoints_to_delete(left, policy, smaller_is_better=smaller_is_better, protected=protected) == []


@given(experiments(), policies, st.booleans(), st.data())
def test_protected_checkpoints_are_never_deleted(
    checkpoints: list[CheckpointFacts], policy: GcPolicy, smaller_is_better: bool, data: st.DataObject
) -> None:
    protected = data.draw(st.sets(st.sampled_from([c.uuid for c in checkpoints]))) if checkpoints else set()
    deleted = checkpoints_to_delete(
        checkpoints, policy, smaller_is_better=smaller_is_better, protected=protected
    )
    assert not protected & set(deleted)


@given(experiments(), st.booleans())
def test_a_policy_that_keeps_less_deletes_more(
    checkpoints: list[CheckpointFacts], smaller_is_better: bool
) -> None:
    loose = set(
        checkpoints_to_delete(
            checkpoints, GcPolicy(2, 2, 2), smaller_is_better=smaller_is_better, protected=set()
        )
    )
    strict = set(
        checkpoints_to_delete(
            checkpoints, GcPolicy(1, 1, 1), smaller_is_better=smaller_is_better, protected=set()
        )
    )
    assert loose <= strict
    assert set(
        checkpoints_to_delete(checkpoints, GcPolicy(0, 0, 0), smaller_is_better=True, protected=set())
    ) == {c.uuid for c in checkpoints}
