"""Queries of checkpoints, answered from the read models (indexed by uuid,
trial and experiment).

A checkpoint is shown with what is derived at read time: the trial's shown
(not superseded) validation at the same steps_completed and its searcher
metric, its experiment's checkpoint_storage section, and the model versions
it is registered as.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from determined.proto import api_pb2
from services.gateway.features.checkpoints.commands import GcInputs, metric_value
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_CHECKPOINTS = f"""
SELECT c.*, v.metrics::text AS validation_metrics_json, v.reported_at_ns AS validated_at_ns,
       ARRAY(SELECT mv.id FROM {S}.model_versions mv WHERE mv.checkpoint_uuid = c.uuid
             ORDER BY mv.model_name, mv.version) AS model_versions
FROM {S}.checkpoints c
LEFT JOIN LATERAL (
  SELECT m.metrics, m.reported_at_ns FROM {S}.metrics m
  WHERE m.trial_id = c.trial_id AND m."group" = 'validation' AND m.steps_completed = c.steps_completed
    AND NOT m.superseded
  ORDER BY m.trial_run_id DESC LIMIT 1
) v ON true
"""

_REPORT_ORDER = " ORDER BY c.reported_at_ns, c.uuid"

_EXPERIMENTS = f"""
SELECT id, state, owner, searcher_metric, smaller_is_better, config_json,
       jsonb_array_length(delete_requests) AS delete_requests,
       (config_json::jsonb -> 'checkpoint_storage')::text AS storage_json
FROM {S}.experiments WHERE id = ANY($1::bigint[])
"""

# The warm-start sources that experiments' searchers name, and when each experiment was created.
_WARM_STARTS = f"""
SELECT searcher ->> 'source_checkpoint_uuid' AS source_checkpoint_uuid,
       searcher ->> 'source_trial_id' AS source_trial_id, started_at_ns
FROM (SELECT config_json::jsonb -> 'searcher' AS searcher, started_at_ns FROM {S}.experiments) s
WHERE searcher ->> 'source_checkpoint_uuid' IS NOT NULL OR searcher ->> 'source_trial_id' IS NOT NULL
"""


# What checkpoint_message reads; the trial query selects them as lc_<column>
# for the trial's latest checkpoint.
CHECKPOINT_COLUMNS = (
    "uuid",
    "trial_id",
    "experiment_id",
    "steps_completed",
    "metadata_json",
    "resources",
    "reported_at_ns",
    "state",
    "delete_error",
)


@dataclass(frozen=True)
class ExperimentFacts:
    """What the checkpoint and model RPCs need of an experiment."""

    experiment_id: int
    state: str
    owner: str
    searcher_metric: str
    smaller_is_better: bool
    config_json: str
    # How many deletions were asked of it (numbers the next one's message id).
    delete_requests: int
    storage_json: str


@dataclass(frozen=True)
class _Found:
    checkpoint: api_pb2.Checkpoint
    # When its validation was reported (None: the trial has none at its steps).
    validated_at_ns: int | None


class CheckpointQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def experiments(self, experiment_ids: Sequence[int]) -> dict[int, ExperimentFacts]:
        rows = await self.pool.fetch(_EXPERIMENTS, list(set(experiment_ids)))
        return {
            row["id"]: ExperimentFacts(
                experiment_id=row["id"],
                state=row["state"],
                owner=row["owner"],
                searcher_metric=row["searcher_metric"],
                smaller_is_better=row["smaller_is_better"],
                config_json=row["config_json"],
                delete_requests=row["delete_requests"],
                storage_json=row["storage_json"] or "",
            )
            for row in rows
        }

    async def experiment(self, experiment_id: int) -> ExperimentFacts | None:
        return (await self.experiments([experiment_id])).get(experiment_id)

    async def users(self, uuid: str) -> list[int]:
        """The trials that reported using the checkpoint, by id."""
        row = await self.pool.fetchrow(f"SELECT used_by::text FROM {S}.checkpoints WHERE uuid = $1", uuid)
        return sorted(json.loads(row["used_by"])) if row is not None else []

    async def checkpoint(self, uuid: str) -> api_pb2.Checkpoint | None:
        return (await self.checkpoints([uuid])).get(uuid)

    async def checkpoints(self, uuids: Sequence[str]) -> dict[str, api_pb2.Checkpoint]:
        """The checkpoints of these uuids that exist, by uuid (any state)."""
        found = await self._fetch(" WHERE c.uuid = ANY($1::text[])", list(uuids))
        return {f.checkpoint.uuid: f.checkpoint for f in found}

    async def of_experiment(self, experiment_id: int) -> list[api_pb2.Checkpoint]:
        """Every checkpoint of the experiment (any state), in report order."""
        found = await self._fetch(" WHERE c.experiment_id = $1" + _REPORT_ORDER, experiment_id)
        return [f.checkpoint for f in found]

    async def of_trial(self, trial_id: int) -> list[api_pb2.Checkpoint]:
        """Every checkpoint of the trial (any state), by steps, then report time."""
        where = " WHERE c.trial_id = $1 ORDER BY c.steps_completed, c.reported_at_ns, c.uuid"
        return [f.checkpoint for f in await self._fetch(where, trial_id)]

    async def gc_inputs(self, experiment: ExperimentFacts) -> GcInputs:
        """The experiment's checkpoints as a GC policy sees them, and those it
        must keep: model versions and warm-start sources."""
        found = await self._fetch(" WHERE c.experiment_id = $1" + _REPORT_ORDER, experiment.experiment_id)
        checkpoints = [f.checkpoint for f in found]
        sources = await self.warm_start_sources(checkpoints)
        return GcInputs(
            checkpoints=checkpoints,
            validated_at_ns={
                f.checkpoint.uuid: f.validated_at_ns for f in found if f.validated_at_ns is not None
            },
            smaller_is_better=experiment.smaller_is_better,
            protected={c.uuid for c in checkpoints if c.model_versions} | sources,
        )

    async def warm_start_sources(self, checkpoints: Sequence[api_pb2.Checkpoint]) -> set[str]:
        """Those of `checkpoints` that an experiment's trials start from: its
        searcher's source_checkpoint_uuid, or the latest checkpoint its
        source_trial_id had when the experiment was created (as the checkpoint
        service reckons them)."""
        uuids = {c.uuid for c in checkpoints}
        trial_ids = {c.trial_id for c in checkpoints}
        sources: set[str] = set()
        for row in await self.pool.fetch(_WARM_STARTS):
            if row["source_checkpoint_uuid"] in uuids:
                sources.add(row["source_checkpoint_uuid"])
            source_trial = row["source_trial_id"] or ""
            if source_trial.isdigit() and int(source_trial) in trial_ids:
                before = [
                    c
                    for c in await self.of_trial(int(source_trial))
                    if c.reported_at_ns <= row["started_at_ns"] and c.state != "DELETED"
                ]
                latest = max(before, key=lambda c: (c.steps_completed, c.reported_at_ns), default=None)
                if latest is not None and latest.uuid in uuids:
                    sources.add(latest.uuid)
        return sources

    async def _fetch(self, where: str, *args: object) -> list[_Found]:
        rows = await self.pool.fetch(_CHECKPOINTS + where, *args)
        experiments = await self.experiments([row["experiment_id"] for row in rows]) if rows else {}
        return [_found(row, experiments.get(row["experiment_id"])) for row in rows]


def _found(row: asyncpg.Record, experiment: ExperimentFacts | None) -> _Found:
    checkpoint = checkpoint_message(row)
    checkpoint.model_versions.extend(row["model_versions"])
    checkpoint.validation_metrics_json = row["validation_metrics_json"] or ""
    if experiment is not None:
        checkpoint.storage_json = experiment.storage_json
        value = metric_value(checkpoint.validation_metrics_json, experiment.searcher_metric)
        if value is not None:
            checkpoint.searcher_metric = value
    return _Found(checkpoint, row["validated_at_ns"])


def checkpoint_message(row: Mapping[str, Any]) -> api_pb2.Checkpoint:
    """A checkpoint's own columns (`_found` adds its validation, storage and
    model versions)."""
    return api_pb2.Checkpoint(
        uuid=row["uuid"],
        trial_id=row["trial_id"],
        experiment_id=row["experiment_id"],
        steps_completed=row["steps_completed"],
        metadata_json=row["metadata_json"],
        resources=json.loads(row["resources"]),
        reported_at_ns=row["reported_at_ns"],
        state=row["state"],
        delete_error=row["delete_error"],
    )
