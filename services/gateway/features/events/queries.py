"""What the event reads need of the read models: which aggregates belong to
an experiment, a trial, an allocation or a task, who owns it, and what a user
owns. One query each, whatever the number of trials (scope.py). And the
sequences of the events of some types (the index by type: type_index.py)."""

from dataclasses import dataclass

import asyncpg

from services.gateway.projector import NAME as PROJECTOR
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels


@dataclass(frozen=True)
class Owned:
    """What a user owns: their experiments, those experiments' trials, their tasks."""

    experiment_ids: frozenset[int]
    trial_ids: frozenset[int]
    task_ids: frozenset[str]


class EventScopeQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def experiment_owner(self, experiment_id: int) -> str | None:
        value = await self.pool.fetchval(f"SELECT owner FROM {S}.experiments WHERE id = $1", experiment_id)
        return None if value is None else str(value)

    async def trial_experiment(self, trial_id: int) -> int | None:
        value = await self.pool.fetchval(f"SELECT experiment_id FROM {S}.trials WHERE id = $1", trial_id)
        return None if value is None else int(value)

    async def allocation_trial(self, allocation_id: str) -> int | None:
        value = await self.pool.fetchval(
            f"SELECT trial_id FROM {S}.allocations WHERE allocation_id = $1", allocation_id
        )
        return None if value is None else int(value)

    async def task_of_allocation(self, allocation_id: str) -> str | None:
        value = await self.pool.fetchval(
            f"SELECT task_id FROM {S}.tasks WHERE allocation_id = $1", allocation_id
        )
        return None if value is None else str(value)

    async def task(self, task_id: str) -> tuple[str, str] | None:
        """(owner, allocation id) of a notebook, TensorBoard, command or shell."""
        row = await self.pool.fetchrow(
            f"SELECT owner, allocation_id FROM {S}.tasks WHERE task_id = $1", task_id
        )
        return None if row is None else (str(row["owner"]), str(row["allocation_id"]))

    async def trials_parts(self, trial_ids: list[int]) -> tuple[list[str], list[str]]:
        """The allocation ids and the checkpoint uuids of these trials."""
        allocations = await self.pool.fetch(
            f"SELECT allocation_id FROM {S}.allocations WHERE trial_id = ANY($1::bigint[]) ORDER BY allocation_id",
            trial_ids,
        )
        checkpoints = await self.pool.fetch(
            f"SELECT uuid FROM {S}.checkpoints WHERE trial_id = ANY($1::bigint[]) ORDER BY uuid", trial_ids
        )
        return [row[0] for row in allocations], [row[0] for row in checkpoints]

    async def owned(self, username: str) -> Owned:
        experiments = await self.pool.fetch(f"SELECT id FROM {S}.experiments WHERE owner = $1", username)
        trials = await self.pool.fetch(
            f"SELECT t.id FROM {S}.trials t JOIN {S}.experiments e ON e.id = t.experiment_id WHERE e.owner = $1",
            username,
        )
        tasks = await self.pool.fetch(f"SELECT task_id FROM {S}.tasks WHERE owner = $1", username)
        return Owned(
            frozenset(row[0] for row in experiments),
            frozenset(row[0] for row in trials),
            frozenset(row[0] for row in tasks),
        )

    async def indexed_through(self) -> int:
        """The last sequence the projector applied: the index by type holds
        every event up to it (written in the same transactions)."""
        value = await self.pool.fetchval(
            f"SELECT sequence FROM {S}.projection_position WHERE name = $1", PROJECTOR
        )
        return int(value or 0)

    async def typed_sequences(self, types: list[str], after: int, through: int, limit: int) -> list[int]:
        """The first `limit` sequences after `after`, up to `through`, of events of these types."""
        rows = await self.pool.fetch(
            f"SELECT sequence FROM {S}.event_types WHERE event_type = ANY($1::text[])"
            " AND sequence > $2 AND sequence <= $3 ORDER BY sequence LIMIT $4",
            types,
            after,
            through,
            limit,
        )
        return [int(row[0]) for row in rows]
