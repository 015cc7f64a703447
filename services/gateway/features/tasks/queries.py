"""Queries of tasks (notebooks, TensorBoards, commands, shells), answered
from the read models, and the converter from their rows to the API's Task.

`proxy_target` is what the gateway's proxy asks before it forwards a request
under /proxy/<task id>/: whose task it is, whether its server answers and
where, and how it ended."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from determined.common import states
from determined.common.states import TaskState
from determined.proto import api_pb2
from services.common.scheduling import DEFAULT_POOL
from services.gateway.features.tasks.commands import SourceTrial
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_TASK = f"SELECT * FROM {S}.tasks WHERE task_id = $1"
# The trials a TensorBoard may show: of experiments ($1) or named ($2), with
# their experiment's checkpoint_storage; not those of a deleted experiment.
_SOURCE_TRIALS = f"""
SELECT t.experiment_id, t.id AS trial_id, coalesce((e.config_json::jsonb -> 'checkpoint_storage')::text, 'null')
       AS storage_json
FROM {S}.trials t JOIN {S}.experiments e ON e.id = t.experiment_id
WHERE (t.experiment_id = ANY($1::bigint[]) OR t.id = ANY($2::bigint[])) AND e.state <> 'DELETED'
ORDER BY t.experiment_id, t.id
"""
_KNOWN_EXPERIMENTS = f"SELECT id FROM {S}.experiments WHERE id = ANY($1::bigint[]) AND state <> 'DELETED'"
_TASK_JOBS = f"SELECT task_id, description, owner FROM {S}.tasks WHERE task_id = ANY($1::text[])"
_TASKS = f"""
SELECT * FROM {S}.tasks
WHERE ($1 = '' OR task_type = $1) AND ($2 OR state <> '{TaskState.TERMINATED}')
ORDER BY requested_at_ns, task_id
"""


@dataclass(frozen=True)
class ProxyTarget:
    task_id: str
    # "NOTEBOOK", "TENSORBOARD", "COMMAND" or "SHELL".
    task_type: str
    owner: str
    # A TaskState word.
    state: str
    # "host:port" where its server answers; "" until it is ready, and once it has ended.
    proxy_address: str
    # How it ended ("exited with code 1", "killed by alice; exit code 137", ...); "" while it has not.
    exit_summary: str


async def proxy_target(pool: asyncpg.Pool | ReadModels, task_id: str) -> ProxyTarget | None:
    """The task the proxy forwards /proxy/<task id>/ to; None: no such task
    (in the read models yet). ReadModelsUnavailableError while PostgreSQL is down."""
    row = await _read_models(pool).fetchrow(_TASK, task_id)
    if row is None:
        return None
    ended = row["state"] == TaskState.TERMINATED
    return ProxyTarget(
        task_id=row["task_id"],
        task_type=row["task_type"],
        owner=row["owner"],
        state=row["state"],
        proxy_address="" if ended else row["proxy_address"],
        exit_summary=states.task_exit_summary(str(row["exit_reason"]), row["exit_code"]) if ended else "",
    )


class TaskQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def task(self, task_id: str) -> api_pb2.Task | None:
        row = await self.pool.fetchrow(_TASK, task_id)
        return None if row is None else task_message(row)

    async def tasks(self, task_type: str, include_terminated: bool) -> list[api_pb2.Task]:
        """Every task of that type ("": every type), oldest first; ended ones
        only when `include_terminated`."""
        rows = await self.pool.fetch(_TASKS, task_type, include_terminated)
        return [task_message(row) for row in rows]

    async def proxy_target(self, task_id: str) -> ProxyTarget | None:
        return await proxy_target(self.pool, task_id)

    async def task_jobs(self, task_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """Task id -> (description, owner) of these tasks: what `det job list` shows of their jobs."""
        rows = await self.pool.fetch(_TASK_JOBS, list(task_ids))
        return {row["task_id"]: (row["description"], row["owner"]) for row in rows}

    async def source_trials(
        self, experiment_ids: Sequence[int], trial_ids: Sequence[int]
    ) -> list[SourceTrial]:
        """Every trial of these experiments and these trials (of experiments not
        deleted), by experiment and trial id."""
        rows = await self.pool.fetch(_SOURCE_TRIALS, list(experiment_ids), list(trial_ids))
        return [SourceTrial(row["experiment_id"], row["trial_id"], row["storage_json"]) for row in rows]

    async def known_experiments(self, experiment_ids: Sequence[int]) -> set[int]:
        """Those of these experiments that exist (and are not deleted)."""
        rows = await self.pool.fetch(_KNOWN_EXPERIMENTS, list(experiment_ids))
        return {int(row["id"]) for row in rows}


def _read_models(pool: asyncpg.Pool | ReadModels) -> ReadModels:
    return pool if isinstance(pool, ReadModels) else ReadModels(pool)


def task_message(row: Mapping[str, Any]) -> api_pb2.Task:
    ended = row["state"] == TaskState.TERMINATED
    task = api_pb2.Task(
        id=row["task_id"],
        task_type=row["task_type"],
        description=row["description"],
        owner=row["owner"],
        state=row["state"],
        allocation_id=row["allocation_id"],
        resource_pool=row["resource_pool"] or DEFAULT_POOL,
        slots=row["slots"],
        priority=row["priority"],
        agent_id=row["agent_id"],
        start_time_ns=row["requested_at_ns"],
        end_time_ns=row["ended_at_ns"] or 0,
        exit_reason=row["exit_reason"],
        ready=bool(row["proxy_address"]) and not ended,
        config_json=row["config_json"],
        command=json.loads(row["command"]),
        experiment_ids=json.loads(row["experiment_ids"]),
        trial_ids=json.loads(row["trial_ids"]),
        job_id=row["job_id"],
    )
    if row["exit_code"] is not None:
        task.exit_code = row["exit_code"]
    return task
