"""Queries of experiments, answered from the read models, and the converter
from their rows to the API's messages. An experiment's progress is the
searcher's (ExperimentProgressChanged), else the mean of its trials'; 1.0
once COMPLETED."""

import json
from dataclasses import dataclass
from typing import Any

import asyncpg

from determined.proto import api_pb2
from services.common.scheduling import DEFAULT_POOL
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_EXPERIMENTS = f"""
SELECT e.*, count(t.id) AS num_trials,
       CASE WHEN e.state = 'COMPLETED' THEN 1.0
            ELSE coalesce(e.progress, avg(t.progress), 0.0) END AS shown_progress
FROM {S}.experiments e LEFT JOIN {S}.trials t ON t.experiment_id = e.id
"""


_GROUP_EXPERIMENTS = " GROUP BY e.id ORDER BY e.id"


# What experiment listings may sort by (HTTP sortBy), and the column each sorts on.
_EXPERIMENT_SORTS = {
    "id": "e.id",
    "name": "e.name",
    "description": "e.description",
    "owner": "e.owner",
    "state": "e.state",
    "start_time": "e.started_at_ns",
    "end_time": "e.ended_at_ns",
    "progress": "shown_progress",
    "num_trials": "num_trials",
    # Those without one come last either way.
    "best_trial_searcher_metric": "e.best_metric IS NULL, e.best_metric",
}


EXPERIMENT_SORTS = tuple(_EXPERIMENT_SORTS)
# Determined's names of sorts that differ from ours (REST sortBy, GetExperimentsRequest.sort_by).
SORT_ALIASES = {"user": "owner", "searcher_metric_val": "best_trial_searcher_metric"}


@dataclass(frozen=True)
class ExperimentListing:
    """Which experiments a listing shows and in what order. Deleted ones
    are shown only when `states` names DELETED."""

    states: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()
    # A part of the name, in any case.
    name: str = ""
    # Only those with every one of these labels.
    labels: tuple[str, ...] = ()
    # Only archived (True) or unarchived (False) ones; None: both.
    archived: bool | None = None
    # One of EXPERIMENT_SORTS.
    sort_by: str = "id"
    descending: bool = False

    def where(self) -> tuple[str, list[Any]]:
        """The WHERE clause over `e` (experiments) and its arguments ($1...)."""
        conditions: list[str] = []
        args: list[Any] = []
        if self.states:
            args.append(list(self.states))
            conditions.append(f"e.state = ANY(${len(args)}::text[])")
        else:
            conditions.append("e.state <> 'DELETED'")
        if self.owners:
            args.append(list(self.owners))
            conditions.append(f"e.owner = ANY(${len(args)}::text[])")
        if self.name:
            args.append(self.name)
            conditions.append(f"strpos(lower(e.name), lower(${len(args)})) > 0")
        if self.labels:
            args.append(json.dumps(list(self.labels)))
            conditions.append(f"e.labels @> ${len(args)}::jsonb")
        if self.archived is not None:
            args.append(self.archived)
            conditions.append(f"e.archived = ${len(args)}")
        return " WHERE " + " AND ".join(conditions), args


@dataclass(frozen=True)
class ExperimentJob:
    name: str
    owner: str
    state: str


class ExperimentQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def experiments(
        self, limit: int = 0, offset: int = 0, listing: ExperimentListing | None = None
    ) -> list[api_pb2.Experiment]:
        """The experiments `listing` selects (default: every one but the deleted
        ones, by id), `limit` of them (0: all) after the first `offset`."""
        listing = listing or ExperimentListing()
        where, args = listing.where()
        order = f"{_EXPERIMENT_SORTS[listing.sort_by]} {'DESC' if listing.descending else 'ASC'}, e.id"
        sql = (
            _EXPERIMENTS
            + where
            + f" GROUP BY e.id ORDER BY {order}"
            + f" LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}"
        )
        rows = await self.pool.fetch(sql, *args, limit or None, offset)
        return [experiment_message(row) for row in rows]

    async def count_experiments(self, listing: ExperimentListing) -> int:
        where, args = listing.where()
        return int(await self.pool.fetchval(f"SELECT count(*) FROM {S}.experiments e" + where, *args))

    async def experiment(self, experiment_id: int) -> api_pb2.Experiment | None:
        row = await self.pool.fetchrow(_EXPERIMENTS + " WHERE e.id = $1" + _GROUP_EXPERIMENTS, experiment_id)
        return None if row is None else experiment_message(row)

    async def experiment_state(self, experiment_id: int) -> str | None:
        state = await self.pool.fetchval(f"SELECT state FROM {S}.experiments WHERE id = $1", experiment_id)
        return None if state is None else str(state)

    async def best_validation(self, experiment_id: int) -> float | None:
        """The best value of the experiment's searcher metric over its shown
        validations, honouring smaller_is_better; None when there is none."""
        best = await self.pool.fetchval(
            f"SELECT best_metric FROM {S}.experiments WHERE id = $1", experiment_id
        )
        return None if best is None else float(best)

    async def experiment_jobs(self, experiment_ids: list[int]) -> dict[int, ExperimentJob]:
        """What GetJobs shows of each experiment that the scheduler's queue names."""
        rows = await self.pool.fetch(
            f"SELECT id, name, owner, state FROM {S}.experiments WHERE id = ANY($1::bigint[])", experiment_ids
        )
        return {row["id"]: ExperimentJob(row["name"], row["owner"], row["state"]) for row in rows}


# -- rows to messages ------------------------------------------------------------


def experiment_message(row: asyncpg.Record) -> api_pb2.Experiment:
    return api_pb2.Experiment(
        id=row["id"],
        name=row["name"],
        owner=row["owner"],
        state=row["state"],
        progress=float(row["shown_progress"]),
        started_at_ns=row["started_at_ns"],
        ended_at_ns=row["ended_at_ns"] or 0,
        description=row["description"],
        labels=json.loads(row["labels"]),
        resource_pool=row["resource_pool"] or DEFAULT_POOL,
        searcher_name=row["searcher_name"],
        searcher_metric=row["searcher_metric"],
        num_trials=row["num_trials"],
        config_json=row["config_json"],
        context_hash=row["context_hash"],
        # A failed deletion says why files are left (the end reason shows again once it is asked again).
        end_reason=row["delete_error"] if row["state"] == "DELETE_FAILED" else row["end_reason"],
        best_trial_searcher_metric=row["best_metric"],
        archived=row["archived"],
        notes=row["notes"],
        parent_id=row["parent_id"],
        unmanaged=row["unmanaged"],
    )
