"""A trial's and an experiment's best metric: read-model columns the projector
keeps per validation (projection.METRICS_UPSERT), following the searcher's
metric and smaller_is_better, counted again when a resumed run supersedes a
validation (METRICS_SUPERSEDED); the same however the log is cut into batches
or duplicated. Against a real PostgreSQL: the rule lives in those statements."""

import json
from collections.abc import AsyncIterator, Iterable

import asyncpg
import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Append, wrap
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.features.parts import Queries
from services.gateway.projector import Projector
from services.gateway.schema import create_schema, drop_schema


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    created = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    yield created
    await created.close()


def experiment(experiment_id: int, metric: str, smaller_is_better: bool) -> ev.ExperimentCreated:
    config = {"searcher": {"name": "random", "metric": metric, "smaller_is_better": smaller_is_better}}
    return ev.ExperimentCreated(
        experiment_id=experiment_id, name="e", owner="o", config_json=json.dumps(config)
    )


def validation(
    trial_id: int, run_id: int, steps: int, metrics: str, experiment_id: int = 1
) -> ev.TrialValidationReported:
    return ev.TrialValidationReported(
        trial_id=trial_id,
        experiment_id=experiment_id,
        trial_run_id=run_id,
        steps_completed=steps,
        metrics_json=metrics,
    )


def requested(trial_id: int, run_id: int, resumed_at: int, experiment_id: int = 1) -> ev.AllocationRequested:
    launch = ev.TrialLaunch(
        experiment_id=experiment_id, trial_id=trial_id, trial_run_id=run_id, steps_completed=resumed_at
    )
    return ev.AllocationRequested(allocation_id=f"{trial_id}.{run_id}", task_id=str(trial_id), trial=launch)


# Experiment 1 minimises loss over trials 1 and 2; experiment 2 maximises acc (trial 3).
BEFORE_RESUME = [
    experiment(1, "loss", smaller_is_better=True),
    experiment(2, "acc", smaller_is_better=False),
    ev.TrialCreated(trial_id=1, experiment_id=1),
    ev.TrialCreated(trial_id=2, experiment_id=1),
    ev.TrialCreated(trial_id=3, experiment_id=2),
    requested(1, 1, 0),
    validation(1, 1, 10, '{"loss": 0.5}'),
    validation(1, 1, 20, '{"loss": 0.2}'),
    validation(2, 1, 10, '{"loss": 0.4, "acc": 0.01}'),
    validation(2, 1, 20, '{"loss": "NaN"}'),  # no number: left out
    validation(2, 1, 30, '{"accuracy": 0.0}'),  # not the searcher metric
    validation(3, 1, 10, '{"acc": 0.7}', experiment_id=2),
    validation(3, 1, 20, '{"acc": 0.9}', experiment_id=2),
]
# Trial 1 resumes from its checkpoint at 10: its 0.2 at 20 is superseded; its new run reports 0.3 there.
AFTER_RESUME = [requested(1, 2, 10), validation(1, 2, 20, '{"loss": 0.3}')]


def stored(payloads: Iterable[object], first: int = 1) -> list[StoredEvent]:
    return [
        StoredEvent(
            sequence, wrap(Append("x/1", payload, f"m-{sequence}"), actor="t", occurred_at_ns=sequence), False
        )
        for sequence, payload in enumerate(payloads, first)
    ]


async def best(pool: asyncpg.Pool) -> dict[int, float | None]:
    return {
        e.id: (e.best_trial_searcher_metric if e.HasField("best_trial_searcher_metric") else None)
        for e in await Queries(pool).experiments.experiments()
    }


async def trial_best(pool: asyncpg.Pool) -> dict[int, float | None]:
    queries = Queries(pool)
    trials = [t for experiment_id in (1, 2) for t in await queries.trials.trials(experiment_id)]
    return {t.id: (t.searcher_metric_value if t.HasField("searcher_metric_value") else None) for t in trials}


async def fresh(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)


async def test_the_best_metric_follows_validations_and_supersessions(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    await fresh(pool)
    projector = Projector(event_store, pool)
    await projector.apply(stored(BEFORE_RESUME))
    assert await best(pool) == {1: 0.2, 2: 0.9}
    assert await trial_best(pool) == {1: 0.2, 2: 0.4, 3: 0.9}
    assert await Queries(pool).experiments.best_validation(1) == 0.2
    await projector.apply(stored(AFTER_RESUME[:1], first=len(BEFORE_RESUME) + 1))
    assert await best(pool) == {1: 0.4, 2: 0.9}  # 0.2 is no longer shown
    assert await trial_best(pool) == {1: 0.5, 2: 0.4, 3: 0.9}
    await projector.apply(stored(AFTER_RESUME[1:], first=len(BEFORE_RESUME) + 2))
    assert await best(pool) == {1: 0.3, 2: 0.9}
    assert await trial_best(pool) == {1: 0.3, 2: 0.4, 3: 0.9}


async def test_the_best_metric_is_the_same_in_any_batches_and_with_duplicates(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    log = BEFORE_RESUME + AFTER_RESUME
    cuts = {
        "one batch": [log],
        "one event per batch": [[payload] for payload in log],
        "every event twice": [[payload, payload] for payload in log],
        "the resume with the validation after it": [BEFORE_RESUME, AFTER_RESUME],
    }
    for name, batches in cuts.items():
        await fresh(pool)
        projector, sequence = Projector(event_store, pool), 1
        for batch in batches:
            await projector.apply(stored(batch, first=sequence))
            sequence += len(batch)
        assert await best(pool) == {1: 0.3, 2: 0.9}, name
        assert await trial_best(pool) == {1: 0.3, 2: 0.4, 3: 0.9}, name
    # A validation of the old run stored after the resume was asked is shown, and counts.
    await fresh(pool)
    late = [*BEFORE_RESUME[:6], requested(1, 2, 10), validation(1, 1, 20, '{"loss": 0.2}')]
    await Projector(event_store, pool).apply(stored(late))
    assert (await best(pool))[1] == 0.2
    assert (await trial_best(pool))[1] == 0.2
