"""Queries of trials, their runs and their metrics, answered from the read
models (never by scanning the log), and the converters from their rows to
the API's messages.

Derived values, computed here so that the projected rows stay absolute:
- a trial shows RUNNING while its state is ACTIVE and its current allocation
  has started and not exited (ACTIVE before that: queued or starting), and
  PAUSED while it is ACTIVE, its experiment is PAUSED and nothing runs;
- restarts = failed allocations (exit code != 0, not killed, not lost with
  their agent, not asked to stop) other than the current one, i.e. a failure
  counts once the trial was given another run, and only runs after the last
  continue count (Determined zeroes restarts on a continue);
- a trial's end_reason is its TrialEnded reason, else the early exit it
  reported ("invalid hyperparameters": a trial that raised det.InvalidHP ends
  COMPLETED with no reason of its own), else why it is stopping (the
  searcher's reason, or a user's kill).

Superseded metric points (trained again by a resumed run) are never shown.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg

from determined.common import states
from determined.proto import api_pb2
from services.gateway.downsample import Point
from services.gateway.features.checkpoints.queries import CHECKPOINT_COLUMNS, checkpoint_message
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import ReadModels

_LATEST_METRIC = """
LEFT JOIN LATERAL (
  SELECT steps_completed, metrics::text AS metrics, reported_at_ns FROM {s}.metrics m
  WHERE m.trial_id = t.id AND m."group" = '{group}' AND NOT m.superseded
  ORDER BY steps_completed DESC, trial_run_id DESC LIMIT 1
) {alias} ON true
"""


_LATESTCHECKPOINT_COLUMNS = ", ".join(f"lc.{column} AS lc_{column}" for column in CHECKPOINT_COLUMNS)


# How `det trial describe` words a reported early exit.
EARLY_EXIT_REASONS = {
    "INVALID_HP": "invalid hyperparameters",
    "USER_REQUESTED_STOP": "stopped early by the training code",
}


_EARLY_EXIT_REASON_SQL = (
    "CASE t.early_exit_reason "
    + " ".join(f"WHEN '{name}' THEN '{shown}'" for name, shown in EARLY_EXIT_REASONS.items())
    + " END"
)


# The state a trial shows (see the module's docstring), of a trial `t` joined
# with its experiment `e` and its current allocation `a` (TRIAL_JOINS).
SHOWN_STATE = """
  CASE WHEN t.state <> 'ACTIVE' THEN t.state
       WHEN a.started_at_ns IS NOT NULL AND a.exited_at_ns IS NULL THEN 'RUNNING'
       WHEN e.state = 'PAUSED' AND (a.allocation_id IS NULL OR a.exited_at_ns IS NOT NULL OR a.canceled)
       THEN 'PAUSED'
       ELSE t.state END"""
TRIAL_JOINS = f"""
LEFT JOIN {S}.experiments e ON e.id = t.experiment_id
LEFT JOIN {S}.allocations a ON a.allocation_id = t.current_allocation_id"""


_TRIALS = f"""
SELECT t.*,
  {SHOWN_STATE} AS shown_state,
  COALESCE(NULLIF(t.end_reason, ''), {_EARLY_EXIT_REASON_SQL}, t.stop_reason,
           CASE WHEN t.kill_requested THEN 'killed by a user' ELSE '' END) AS shown_end_reason,
  (SELECT count(*) FROM {S}.allocations f WHERE f.trial_id = t.id AND f.exit_code <> 0
     AND NOT f.killed AND NOT f.agent_lost AND NOT f.stop_requested
     AND f.allocation_id IS DISTINCT FROM t.current_allocation_id
     AND f.trial_run_id > t.runs_before_continue) AS restarts,
  (SELECT count(*) FROM {S}.checkpoints c WHERE c.trial_id = t.id) AS num_checkpoints,
  lt.steps_completed AS lt_steps, lt.metrics AS lt_metrics, lt.reported_at_ns AS lt_at,
  lv.steps_completed AS lv_steps, lv.metrics AS lv_metrics, lv.reported_at_ns AS lv_at,
  {_LATESTCHECKPOINT_COLUMNS}
FROM {S}.trials t{TRIAL_JOINS}
{_LATEST_METRIC.format(s=S, group="training", alias="lt")}
{_LATEST_METRIC.format(s=S, group="validation", alias="lv")}
LEFT JOIN LATERAL (
  SELECT * FROM {S}.checkpoints c WHERE c.trial_id = t.id
  ORDER BY steps_completed DESC, reported_at_ns DESC LIMIT 1
) lc ON true
"""


_RUNS = f"SELECT * FROM {S}.allocations WHERE trial_id = $1 ORDER BY trial_run_id, requested_at_ns"


# The newest points of each group, read through the primary key (trial_id,
# group, steps_completed, trial_run_id): the recursive part skips from one
# group to the next, so a trial with a million points costs a few index probes.
_RECENT_METRICS = f"""
WITH RECURSIVE groups AS (
  (SELECT "group" FROM {S}.metrics WHERE trial_id = $1 ORDER BY "group" LIMIT 1)
  UNION ALL
  SELECT (SELECT m."group" FROM {S}.metrics m WHERE m.trial_id = $1 AND m."group" > g."group"
          ORDER BY m."group" LIMIT 1)
  FROM groups g WHERE g."group" IS NOT NULL
)
SELECT g."group", r.steps_completed, r.metrics::text AS metrics, r.reported_at_ns
FROM groups g CROSS JOIN LATERAL (
  SELECT steps_completed, trial_run_id, metrics, reported_at_ns FROM {S}.metrics m
  WHERE m.trial_id = $1 AND m."group" = g."group" AND NOT m.superseded
  ORDER BY steps_completed DESC, trial_run_id DESC LIMIT $2
) r
WHERE g."group" IS NOT NULL
ORDER BY g."group", r.steps_completed, r.trial_run_id
"""


RECENT_METRICS_PER_GROUP = 100


# Every shown point, in primary-key order from just after a key (keyset
# pagination: each page is one range scan of the primary key, however deep),
# of every group or of one.
_METRIC_POINTS_SELECT = f"""
SELECT "group", steps_completed, trial_run_id, metrics::text AS metrics, reported_at_ns FROM {S}.metrics
"""


_METRIC_POINTS = (
    _METRIC_POINTS_SELECT
    + """
WHERE trial_id = $1 AND ("group", steps_completed, trial_run_id) > ($2, $3, $4) AND NOT superseded
ORDER BY "group", steps_completed, trial_run_id LIMIT $5
"""
)


_GROUP_METRIC_POINTS = (
    _METRIC_POINTS_SELECT
    + """
WHERE trial_id = $1 AND "group" = $2 AND (steps_completed, trial_run_id) > ($3, $4) AND NOT superseded
ORDER BY steps_completed, trial_run_id LIMIT $5
"""
)


# A chart of one metric of one group (see Queries.metric_chart). The steps the group spans
# (two probes of the primary key), then each of $6 equal ranges of steps from $4 to $5:
# its number of points and its lowest and highest point as [value, steps].
_METRIC_STEPS = f"""
SELECT min(steps_completed), max(steps_completed) FROM {S}.metrics WHERE trial_id = $1 AND "group" = $2
"""


_METRIC_RANGES = f"""
SELECT count(*), min(ARRAY[y, x]), max(ARRAY[y, x]) FROM (
  SELECT steps_completed::double precision AS x, (metrics -> $3)::double precision AS y,
         (steps_completed - $4) * $6 / ($5 - $4 + 1) AS bucket
  FROM {S}.metrics
  WHERE trial_id = $1 AND "group" = $2 AND NOT superseded AND jsonb_typeof(metrics -> $3) = 'number'
  OFFSET 0  -- computes each value once (inlined, each use of y would read the JSON again)
) points GROUP BY bucket
"""


# The points at the steps given ($3, $4: where the group starts and ends), found through the
# primary key.
_METRIC_ENDS = f"""
SELECT steps_completed::double precision, (metrics -> $5)::double precision FROM {S}.metrics
WHERE trial_id = $1 AND "group" = $2 AND steps_completed IN ($3, $4) AND NOT superseded
  AND jsonb_typeof(metrics -> $5) = 'number'
"""


_ALLOCATION = f"""
SELECT a.allocation_id, a.trial_id, t.experiment_id, t.current_allocation_id, a.exited_at_ns IS NOT NULL AS exited,
       a.canceled, a.stop_requested, a.stop_reason, t.searcher_length, t.stop_reason AS searcher_stop
FROM {S}.allocations a JOIN {S}.trials t ON t.id = a.trial_id
WHERE a.allocation_id = $1
"""


@dataclass(frozen=True)
class TrialStatus:
    """What log following and a kill need to know about a trial."""

    experiment_id: int
    state: str
    current_allocation_id: str | None
    # A user asked to kill it (it ends soon); false again once a continue reopens it.
    kill_requested: bool

    @property
    def ended(self) -> bool:
        return self.state in states.TERMINAL_STATES


@dataclass(frozen=True)
class AllocationView:
    """What fencing and WatchAllocation read about one allocation of a trial."""

    allocation_id: str
    trial_id: int
    experiment_id: int
    current_allocation_id: str | None
    exited: bool
    canceled: bool
    stop_requested: bool
    stop_reason: str | None
    searcher_length: int
    # Why the searcher is done with the trial; None while it is not.
    searcher_stop: str | None

    def refusal(self) -> str | None:
        """Why reports from this allocation are refused (None: they are not).
        Every refusal is final: a closed or replaced allocation never reopens."""
        closed = "exited" if self.exited else "canceled" if self.canceled else None
        name = f"allocation {self.allocation_id} of trial {self.trial_id}"
        if closed is not None:
            return f"{name} is closed ({closed}); reports from it are refused"
        if self.current_allocation_id != self.allocation_id:
            return (
                f"{name} is no longer the trial's current allocation ({self.current_allocation_id} is);"
                " reports from it are refused"
            )
        return None


# Where a metric point sits in a trial's points: (group, steps_completed, trial_run_id).
MetricKey = tuple[str, int, int]


class TrialQueries:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = ReadModels(pool)

    async def trials(self, experiment_id: int) -> list[api_pb2.Trial]:
        rows = await self.pool.fetch(_TRIALS + " WHERE t.experiment_id = $1 ORDER BY t.id", experiment_id)
        return [trial_message(row) for row in rows]

    async def trial_ids(self, experiment_id: int) -> list[int]:
        rows = await self.pool.fetch(
            f"SELECT id FROM {S}.trials WHERE experiment_id = $1 ORDER BY id", experiment_id
        )
        return [row["id"] for row in rows]

    async def trial(self, trial_id: int) -> api_pb2.Trial | None:
        row = await self.pool.fetchrow(_TRIALS + " WHERE t.id = $1", trial_id)
        return None if row is None else trial_message(row)

    async def trial_status(self, trial_id: int) -> TrialStatus | None:
        row = await self.pool.fetchrow(
            f"SELECT experiment_id, state, current_allocation_id, kill_requested FROM {S}.trials WHERE id = $1",
            trial_id,
        )
        return None if row is None else TrialStatus(row[0], row[1], row[2], row[3])

    async def trial_metadata(self, trial_id: int) -> str | None:
        """The trial's metadata as JSON text ("{}" until it set one); None: no such trial."""
        value = await self.pool.fetchval(f"SELECT metadata_json FROM {S}.trials WHERE id = $1", trial_id)
        return None if value is None else str(value)

    async def early_exit_reason(self, trial_id: int) -> str | None:
        """The early exit the trial reported (INVALID_HP, ...); None while it reported none."""
        value = await self.pool.fetchval(f"SELECT early_exit_reason FROM {S}.trials WHERE id = $1", trial_id)
        return None if value is None else str(value)

    async def allocation(self, allocation_id: str) -> AllocationView | None:
        row = await self.pool.fetchrow(_ALLOCATION, allocation_id)
        return None if row is None else AllocationView(**dict(row))

    async def runs(self, trial_id: int) -> list[api_pb2.TrialRun]:
        return [run_message(row) for row in await self.pool.fetch(_RUNS, trial_id)]

    async def recent_metrics(self, trial_id: int) -> list[api_pb2.MetricPoint]:
        rows = await self.pool.fetch(_RECENT_METRICS, trial_id, RECENT_METRICS_PER_GROUP)
        return [
            metric_point(row["group"], row["steps_completed"], row["metrics"], row["reported_at_ns"])
            for row in rows
        ]

    async def metric_points(
        self, trial_id: int, group: str, after: MetricKey | None, limit: int
    ) -> list[tuple[MetricKey, api_pb2.MetricPoint]]:
        """Up to `limit` shown points of the trial (of `group`, or of every
        group when it is ""), by group, steps and run, after the key `after`
        (None: from the first); each with its key, to ask for the next page."""
        # (group, -1, -1) sorts before every stored key of the group, ("", -1, -1)
        # before every key: steps and runs are not negative, groups not empty.
        key = after or (group, -1, -1)
        if group:
            rows = await self.pool.fetch(_GROUP_METRIC_POINTS, trial_id, group, key[1], key[2], limit)
        else:
            rows = await self.pool.fetch(_METRIC_POINTS, trial_id, *key, limit)
        return [
            (
                (row["group"], row["steps_completed"], row["trial_run_id"]),
                metric_point(row["group"], row["steps_completed"], row["metrics"], row["reported_at_ns"]),
            )
            for row in rows
        ]

    async def metric_chart(
        self, trial_id: int, group: str, metric: str, ranges: int
    ) -> tuple[int, list[Point]]:
        """How many shown points of the trial's `group` have `metric` as a
        number, and a preselection of them as (steps, value) by steps for a
        chart (MinMax preselection for LTTB): the points at the group's first
        and last steps, and from each of `ranges` equal ranges of steps its
        lowest and highest point. A range of at most two points gives all of them, so a short
        series comes whole; a million points cost one scan in PostgreSQL and
        about 2 * `ranges` points sent."""
        span = await self.pool.fetchrow(_METRIC_STEPS, trial_id, group)
        if span is None or span[0] is None:  # no point in the group
            return 0, []
        first_steps, last_steps = span
        rows = await self.pool.fetch_hashed(
            _METRIC_RANGES, trial_id, group, metric, first_steps, last_steps, ranges
        )
        ends = await self.pool.fetch(_METRIC_ENDS, trial_id, group, first_steps, last_steps, metric)
        chosen = {(float(x), float(y)) for x, y in ends}
        for _, low, high in rows:
            chosen.add((low[1], low[0]))
            chosen.add((high[1], high[0]))
        return sum(row[0] for row in rows), sorted(chosen)


# -- rows to messages ------------------------------------------------------------


def trial_message(row: asyncpg.Record) -> api_pb2.Trial:
    trial = api_pb2.Trial(
        id=row["id"],
        experiment_id=row["experiment_id"],
        state=row["shown_state"],
        hparams_json=row["hparams_json"],
        started_at_ns=row["started_at_ns"],
        ended_at_ns=row["ended_at_ns"] or 0,
        progress=row["progress"],
        restarts=row["restarts"],
        total_batches=row["total_batches"],
        num_checkpoints=row["num_checkpoints"],
        trial_seed=row["trial_seed"],
        end_reason=row["shown_end_reason"],
        rung=row["rung"],
        searcher_length=row["searcher_length"],
        status=row["status"],
        runs=row["runs"],
        searcher_metric_value=row["best_metric"],
    )
    if row["lt_steps"] is not None:
        trial.latest_training.CopyFrom(
            metric_point("training", row["lt_steps"], row["lt_metrics"], row["lt_at"])
        )
    if row["lv_steps"] is not None:
        trial.latest_validation.CopyFrom(
            metric_point("validation", row["lv_steps"], row["lv_metrics"], row["lv_at"])
        )
    if row["lc_uuid"] is not None:
        latest = {column: row[f"lc_{column}"] for column in CHECKPOINT_COLUMNS}
        trial.latest_checkpoint.CopyFrom(checkpoint_message(latest))
    return trial


def metric_point(group: str, steps_completed: int, metrics: str, reported_at_ns: int) -> api_pb2.MetricPoint:
    return api_pb2.MetricPoint(
        group=group, steps_completed=steps_completed, metrics_json=metrics, reported_at_ns=reported_at_ns
    )


def run_message(row: Mapping[str, Any]) -> api_pb2.TrialRun:
    placements = json.loads(row["placements"]) if isinstance(row["placements"], str) else row["placements"]
    state, reason = run_outcome(row)
    return api_pb2.TrialRun(
        allocation_id=row["allocation_id"],
        trial_run_id=row["trial_run_id"],
        agent_ids=[p["agent_id"] for p in placements or ()],
        state=state,
        exit_code=row["exit_code"] or 0,
        reason=reason,
        requested_at_ns=row["requested_at_ns"],
        assigned_at_ns=row["assigned_at_ns"] or 0,
        exited_at_ns=row["exited_at_ns"] or 0,
    )


def run_outcome(row: Mapping[str, Any]) -> tuple[str, str]:
    """How a run (an allocation row) stands or ended, and why, in users' words."""
    if row["canceled"]:
        return "CANCELED", row["stop_reason"] or ""
    if row["exited_at_ns"] is None:
        return ("RUNNING" if row["placements"] else "QUEUED"), row["stop_reason"] or ""
    if row["agent_lost"]:
        return "AGENT_LOST", row["error"] or "the agent was lost"
    if row["stop_requested"] and (row["exit_code"] == 0 or row["killed"]):
        return "STOPPED", row["stop_reason"] or ""
    if row["killed"]:
        return "KILLED", row["stop_reason"] or row["error"] or ""
    if row["exit_code"] == 0 and not row["error"]:
        return "COMPLETED", ""
    return "FAILED", row["error"] or f"exit code {row['exit_code']}"
