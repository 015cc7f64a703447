"""The read models' counts that /metrics shows: trials by the state they show,
trials' runs (allocations) by how they stand or ended, tasks by type and state.

Each is one aggregate statement: its cost grows with the table, not with the
log, and its answer is a few rows. A run's state is `run_outcome`'s, the one
that `det trial describe` shows, applied to each group of the columns it reads.
"""

from dataclasses import dataclass

import asyncpg

from services.gateway.features.trials.queries import SHOWN_STATE, TRIAL_JOINS, run_outcome
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_TRIAL_STATES = f"SELECT {SHOWN_STATE} AS state, count(*) AS n FROM {S}.trials t{TRIAL_JOINS} GROUP BY 1"

# The columns run_outcome reads to tell a run's state, each reduced to what it decides on.
_RUN_GROUPS = f"""
SELECT canceled, exited_at_ns IS NULL AS open, placements IS NOT NULL AS placed, agent_lost,
       stop_requested, killed, coalesce(exit_code = 0, false) AS exit_zero,
       coalesce(error, '') <> '' AS has_error, count(*) AS n
FROM {S}.allocations GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
"""

_TASK_STATES = f"SELECT task_type, state, count(*) AS n FROM {S}.tasks GROUP BY 1, 2"


@dataclass(frozen=True)
class Counts:
    # Shown trial state -> trials.
    trials: dict[str, int]
    # Run state (AllocationState) -> trials' runs.
    allocations: dict[str, int]
    # (task type, TaskState) -> notebooks, TensorBoards, commands, shells.
    tasks: dict[tuple[str, str], int]


class MonitoringQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def counts(self) -> Counts:
        trials = {str(row["state"]): int(row["n"]) for row in await self.pool.fetch(_TRIAL_STATES)}
        allocations: dict[str, int] = {}
        for group in await self.pool.fetch(_RUN_GROUPS):
            state = run_state(dict(group))
            allocations[state] = allocations.get(state, 0) + int(group["n"])
        tasks = {
            (str(row["task_type"]), str(row["state"])): int(row["n"])
            for row in await self.pool.fetch(_TASK_STATES)
        }
        return Counts(trials, allocations, tasks)


def run_state(group: dict[str, object]) -> str:
    """The state of the runs of one group of _RUN_GROUPS, as run_outcome tells it
    from a row: a stand-in row with the group's values where run_outcome looks."""
    row = {
        "canceled": group["canceled"],
        "exited_at_ns": None if group["open"] else 1,
        "placements": [{}] if group["placed"] else None,
        "agent_lost": group["agent_lost"],
        "stop_requested": group["stop_requested"],
        "killed": group["killed"],
        "exit_code": 0 if group["exit_zero"] else 1,
        "error": "error" if group["has_error"] else None,
        "stop_reason": None,
    }
    return run_outcome(row)[0]
