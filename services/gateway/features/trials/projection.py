"""How events change the rows of trials, their runs (allocations) and their
metric points (pure; see plan.py and projection.py for the fold).

A trial's stored state is ACTIVE until it ends; the queries show RUNNING
while its current allocation has started and not exited (see queries.py).
A trial's total_batches is a max over its points, lowered to the resume
point when a run is requested: max and min fold to the same value however
often and in whatever batches the log is applied.

A trial's best metric (its experiment's searcher metric over the validations
shown) and its experiment's (the best of its trials') are kept by the two
metric statements instead of the fold: a stored validation raises them (min or
max, so they too fold the same however often applied), and a resumed run that
supersedes a validation has its trial's counted again over the stored ones,
which no fold over one row can do.
"""

import json
from typing import Any

from google.protobuf.message import Message

from determined.common import states
from determined.proto import events_pb2
from services.common.envelope import payload_of
from services.common.stops import Stops
from services.gateway.features.feature import Feature, Statement
from services.gateway.features.trials.tables import allocations, metrics, trials
from services.gateway.plan import SUPERSEDED, MetricKey, Plan, Row, created, first, updated
from services.gateway.read_models import SCHEMA as S

# The experiment's searcher metric in a validation's metrics (`{metrics}`): a
# number, or NULL ("NaN" as stored, a missing or non-numeric metric).
_SEARCHER_VALUE = (
    "CASE WHEN jsonb_typeof({metrics} -> e.searcher_metric) = 'number'"
    " THEN ({metrics} ->> e.searcher_metric)::double precision END"
)

# The better of two values of the searcher metric (`{stored}` may be NULL) by
# `{smaller}` (the experiment's smaller_is_better).
_BETTER = "CASE WHEN {smaller} THEN least({stored}, {new}) ELSE greatest({stored}, {new}) END"

# The best of a group's values (`{values}`), by the same rule.
_BEST = "CASE WHEN {smaller} THEN min({values}) ELSE max({values}) END"

# unnest() makes one statement of a whole batch of metric points (INFRA-NOTES:
# ~215,000 rows/s); ON CONFLICT keeps a replayed point absolute, and a point
# once superseded stays so. The same statement raises the best metric of the
# trials whose shown validations it stored, and of their experiments (min or
# max: idempotent, in any batches). It runs after the rows and the
# supersessions of its batch.
METRICS_UPSERT = f"""
WITH stored AS (
  INSERT INTO {
    S
}.metrics (trial_id, "group", steps_completed, trial_run_id, metrics, reported_at_ns, superseded)
  SELECT t, g, s, r, m::jsonb, a, x FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::int[], $5::text[],
    $6::bigint[], $7::boolean[]) AS u(t, g, s, r, m, a, x)
  ON CONFLICT (trial_id, "group", steps_completed, trial_run_id) DO UPDATE SET
    metrics = excluded.metrics, reported_at_ns = excluded.reported_at_ns,
    superseded = {S}.metrics.superseded OR excluded.superseded
  RETURNING trial_id, CASE WHEN "group" = 'validation' AND NOT superseded THEN metrics END AS validation
), shown AS (
  SELECT t.id AS trial_id, e.id AS experiment_id, e.smaller_is_better,
    {_SEARCHER_VALUE.format(metrics="v.validation")} AS value
  FROM stored v JOIN {S}.trials t ON t.id = v.trial_id JOIN {S}.experiments e ON e.id = t.experiment_id
  WHERE v.validation IS NOT NULL
), trial_best AS (
  SELECT trial_id, experiment_id, smaller_is_better,
    {_BEST.format(smaller="smaller_is_better", values="value")} AS value
  FROM shown GROUP BY trial_id, experiment_id, smaller_is_better
), raised_trials AS (
  UPDATE {S}.trials t SET best_metric = {
    _BETTER.format(smaller="b.smaller_is_better", stored="t.best_metric", new="b.value")
}
  FROM trial_best b WHERE t.id = b.trial_id AND b.value IS NOT NULL
)
UPDATE {S}.experiments e SET best_metric = {
    _BETTER.format(smaller="e.smaller_is_better", stored="e.best_metric", new="b.value")
}
FROM (SELECT experiment_id, {_BEST.format(smaller="smaller_is_better", values="value")} AS value
      FROM trial_best GROUP BY experiment_id, smaller_is_better) b
WHERE e.id = b.experiment_id AND b.value IS NOT NULL
"""

# Determined archives the metrics a resumed run reports again; here they stay,
# marked, so that every step is shown once. When that hides a validation, the
# trial's best metric is counted again over its validations still shown (the
# statement's own marks are not visible to it: they are excluded by the same
# condition), and its experiment's is the best of that and its other trials'.
METRICS_SUPERSEDED = f"""
WITH marked AS (
  UPDATE {S}.metrics SET superseded = true
  WHERE trial_id = $1 AND trial_run_id < $2 AND steps_completed > $3 AND NOT superseded
  RETURNING "group"
), counted AS (
  SELECT t.id, t.experiment_id, (
    SELECT {_BEST.format(smaller="e.smaller_is_better", values="v.value")} FROM (
      SELECT {_SEARCHER_VALUE.format(metrics="m.metrics")} AS value FROM {S}.metrics m
      WHERE m.trial_id = t.id AND m."group" = 'validation' AND NOT m.superseded
        AND NOT (m.trial_run_id < $2 AND m.steps_completed > $3)
    ) v
  ) AS value
  FROM {S}.trials t JOIN {S}.experiments e ON e.id = t.experiment_id
  WHERE t.id = $1 AND EXISTS (SELECT FROM marked WHERE "group" = 'validation')
), recounted_trial AS (
  UPDATE {S}.trials t SET best_metric = c.value FROM counted c WHERE t.id = c.id
)
UPDATE {S}.experiments e SET best_metric = (
  SELECT {
    _BETTER.format(
        smaller="e.smaller_is_better",
        stored="c.value",
        new=_BEST.format(smaller="e.smaller_is_better", values="o.best_metric"),
    )
}
  FROM {S}.trials o WHERE o.experiment_id = e.id AND o.id <> c.id
)
FROM counted c WHERE e.id = c.experiment_id
"""


def statements(plan: Plan) -> list[Statement]:
    """After the rows: the stored points a resumed run supersedes, then the
    batch's points as one upsert."""
    found: list[Statement] = []
    if plan.superseded:
        found.append((METRICS_SUPERSEDED, plan.superseded))
    if plan.metric_rows:
        found.append((METRICS_UPSERT, [tuple(plan.metric_columns())]))
    return found


def _metrics_reported(plan: Plan, payload: events_pb2.TrialMetricsReported, at: int) -> None:
    trial_id, run_id = payload.trial_id, payload.trial_run_id
    for report in payload.reports:
        key = (trial_id, report.group, report.steps_completed, run_id)
        _metric_point(plan, key, report.metrics_json, report.reported_at_ns or at)


def _validation_reported(plan: Plan, payload: events_pb2.TrialValidationReported, at: int) -> None:
    key = (payload.trial_id, "validation", payload.steps_completed, payload.trial_run_id)
    _metric_point(plan, key, payload.metrics_json, payload.reported_at_ns or at)


def _trial_created(plan: Plan, payload: events_pb2.TrialCreated, at: int) -> None:
    plan.change("trials", payload.trial_id, created(trial_row(payload, at)))


def _trial_ended(plan: Plan, payload: events_pb2.TrialEnded, at: int) -> None:
    state = states.trial_state(payload.state).value
    plan.change("trials", payload.trial_id, (_end_trial, (state, payload.reason, at)))


def _trial_reopened(plan: Plan, payload: events_pb2.TrialReopened, at: int) -> None:
    """Its experiment was continued: the trial trains again (det experiment continue)."""
    reopened = updated(
        state="ACTIVE",
        ended_at_ns=None,
        end_reason="",
        searcher_length=payload.length,
        stop_reason=None,
        kill_requested=False,
        early_exit_reason=None,
    )
    plan.change("trials", payload.trial_id, reopened)
    plan.change("trials", payload.trial_id, (_restarts_from_now, ()))


def _trial_progress_reported(plan: Plan, payload: events_pb2.TrialProgressReported, at: int) -> None:
    plan.change("trials", payload.trial_id, updated(progress=payload.progress))


def _trial_length_set(plan: Plan, payload: events_pb2.TrialLengthSet, at: int) -> None:
    plan.change("trials", payload.trial_id, updated(rung=payload.rung, searcher_length=payload.length))


def _trial_stop_requested(plan: Plan, payload: events_pb2.TrialStopRequested, at: int) -> None:
    plan.change("trials", payload.trial_id, updated(stop_reason=payload.reason))


def _trial_status_reported(plan: Plan, payload: events_pb2.TrialStatusReported, at: int) -> None:
    plan.change("trials", payload.trial_id, updated(status=payload.status))


def _trial_kill_requested(plan: Plan, payload: events_pb2.TrialKillRequested, at: int) -> None:
    plan.change("trials", payload.trial_id, updated(kill_requested=True))


def _trial_early_exit_reported(plan: Plan, payload: events_pb2.TrialEarlyExitReported, at: int) -> None:
    """The first early exit a trial reported is the one that counts (the
    gateway stores one per trial)."""
    plan.change("trials", payload.trial_id, first(early_exit_reason=payload.reason))


def _trial_metadata_set(plan: Plan, payload: events_pb2.TrialMetadataSet, at: int) -> None:
    """Replaced whole: the last one set is the trial's."""
    plan.change("trials", payload.trial_id, updated(metadata_json=payload.metadata_json or "{}"))


def _allocation_requested(plan: Plan, payload: events_pb2.AllocationRequested, at: int) -> None:
    """A trial's next run: the allocation's row, the trial's current run, and
    the earlier runs' points past the resume point superseded, those already
    stored (a statement) and those earlier in this batch (their rows here).
    Points reported after the request are never superseded by it, however the
    log is cut into batches. The steps past its resume point are trained
    again, so they no longer count as batches the trial got through."""
    if not payload.HasField("trial"):
        return
    launch = payload.trial
    trial_id, run_id, resumed_at = launch.trial_id, launch.trial_run_id, launch.steps_completed
    plan.change(
        "allocations", payload.allocation_id, created(allocation_row(payload.allocation_id, launch, at))
    )
    plan.change("trials", trial_id, (_set_current_run, (payload.allocation_id, run_id, resumed_at)))
    plan.superseded.append((trial_id, run_id, resumed_at))
    for key in plan.trial_points.get(trial_id, ()):
        if key[3] < run_id and key[2] > resumed_at:
            plan.metric_rows[key] = (*plan.metric_rows[key][:SUPERSEDED], True)
    if trial_id in plan.total_batches:
        plan.total_batches[trial_id] = min(plan.total_batches[trial_id], resumed_at)


def _allocation_assigned(plan: Plan, payload: events_pb2.AllocationAssigned, at: int) -> None:
    placements = json.dumps([_placement(p) for p in payload.placements])
    plan.change("allocations", payload.allocation_id, updated(placements=placements))
    plan.change("allocations", payload.allocation_id, first(assigned_at_ns=at))


def _allocation_started(plan: Plan, payload: events_pb2.AllocationStarted, at: int) -> None:
    plan.change("allocations", payload.allocation_id, first(started_at_ns=at))


def _allocation_stop_event(plan: Plan, envelope: events_pb2.Envelope) -> None:
    """A stop request, its withdrawal or the trial's acknowledgement."""
    event: Any = payload_of(envelope)
    plan.change("allocations", event.allocation_id, (_stops_folded, (envelope.event_id, event)))


def _stops_folded(row: Row | None, event_id: str, event: Message) -> Row | None:
    """The row's stops after the event, as every reader folds them (stops.py);
    the reason is the first one's since the allocation was last asked nothing."""
    if row is None:
        return None
    before = Stops(frozenset(json.loads(row["stop_requests"])), row["stop_acknowledged"])
    stops = before.folded(event_id, event)
    row["stop_requests"] = json.dumps(sorted(stops.standing))
    row["stop_acknowledged"] = stops.acknowledged
    row["stop_requested"] = stops.requested
    if not stops.requested:
        row["stop_reason"] = None
    elif row["stop_reason"] is None and isinstance(event, events_pb2.AllocationStopRequested):
        row["stop_reason"] = event.reason
    return row


def _allocation_canceled(plan: Plan, payload: events_pb2.AllocationCanceled, at: int) -> None:
    plan.change("allocations", payload.allocation_id, updated(canceled=True))


def _allocation_exited(plan: Plan, payload: events_pb2.AllocationExited, at: int) -> None:
    plan.change("allocations", payload.allocation_id, first(exited_at_ns=at))
    exited = updated(
        exit_code=payload.exit_code, killed=payload.killed, error=payload.error, agent_lost=payload.agent_lost
    )
    plan.change("allocations", payload.allocation_id, exited)


def _end_trial(row: Row | None, state: str, reason: str, at: int) -> Row | None:
    if row is not None:
        row["state"] = state
        row["end_reason"] = reason
        if row["ended_at_ns"] is None:
            row["ended_at_ns"] = at
        if state == "COMPLETED":
            row["progress"] = 1.0
    return row


def _restarts_from_now(row: Row | None) -> Row | None:
    """Its restarts count from 0 again: only runs after the present ones."""
    if row is not None:
        row["runs_before_continue"] = row["runs"]
    return row


def _set_current_run(row: Row | None, allocation_id: str, run_id: int, resumed_at: int) -> Row | None:
    """The trial's newest run; the steps past its resume point are trained
    again, so they no longer count as batches the trial got through."""
    if row is not None:
        row["current_allocation_id"] = allocation_id
        row["runs"] = run_id
        row["total_batches"] = min(row["total_batches"], resumed_at)
    return row


def trial_row(payload: events_pb2.TrialCreated, at: int) -> Row:
    return {
        "id": payload.trial_id,
        "experiment_id": payload.experiment_id,
        "request_id": payload.request_id,
        "state": "ACTIVE",
        "hparams_json": payload.hparams_json,
        "trial_seed": payload.trial_seed,
        "started_at_ns": at,
        "ended_at_ns": None,
        "end_reason": "",
        "progress": 0.0,
        "total_batches": 0,
        "current_allocation_id": None,
        "runs": 0,
        "runs_before_continue": 0,
        "rung": 0,
        "searcher_length": payload.length,
        "stop_reason": None,
        "status": "",
        "kill_requested": False,
        "early_exit_reason": None,
        "metadata_json": "{}",
        "best_metric": None,
    }


def allocation_row(allocation_id: str, launch: events_pb2.TrialLaunch, at: int) -> Row:
    return {
        "allocation_id": allocation_id,
        "trial_id": launch.trial_id,
        "trial_run_id": launch.trial_run_id,
        "requested_at_ns": at,
        "placements": None,
        "assigned_at_ns": None,
        "started_at_ns": None,
        "stop_requested": False,
        "stop_reason": None,
        "stop_acknowledged": False,
        "stop_requests": "[]",
        "canceled": False,
        "exited_at_ns": None,
        "exit_code": None,
        "killed": False,
        "agent_lost": False,
        "error": None,
    }


def _metric_point(plan: Plan, key: MetricKey, metrics_json: str, reported_at_ns: int) -> None:
    """One metric point; a point repeated in the batch keeps its newest value
    and its place among the batch's rows moves to the end (report order)."""
    rows = plan.metric_rows
    earlier = rows.pop(key, None)
    trial_id, group, steps, run_id = key
    rows[key] = (
        trial_id,
        group,
        steps,
        run_id,
        metrics_json or "{}",
        reported_at_ns,
        earlier is not None and earlier[SUPERSEDED],
    )
    points = plan.trial_points.get(trial_id)
    if points is None:
        plan.trial_points[trial_id] = points = set()
    points.add(key)
    if steps > plan.total_batches.get(trial_id, 0):
        plan.total_batches[trial_id] = steps
    elif trial_id not in plan.total_batches:
        plan.total_batches[trial_id] = 0


def _placement(placement: events_pb2.Placement) -> dict[str, object]:
    return {"agent_id": placement.agent_id, "slot_ids": list(placement.slot_ids)}


FEATURE = Feature(
    "trials",
    row_tables=(trials, allocations),
    other_tables=(metrics,),
    rules={
        "trial_metrics_reported": _metrics_reported,
        "trial_validation_reported": _validation_reported,
        "trial_created": _trial_created,
        "trial_ended": _trial_ended,
        "trial_reopened": _trial_reopened,
        "trial_progress_reported": _trial_progress_reported,
        "trial_length_set": _trial_length_set,
        "trial_stop_requested": _trial_stop_requested,
        "trial_status_reported": _trial_status_reported,
        "trial_kill_requested": _trial_kill_requested,
        "trial_early_exit_reported": _trial_early_exit_reported,
        "trial_metadata_set": _trial_metadata_set,
        "allocation_requested": _allocation_requested,
        "allocation_assigned": _allocation_assigned,
        "allocation_started": _allocation_started,
        "allocation_canceled": _allocation_canceled,
        "allocation_exited": _allocation_exited,
    },
    envelope_rules={
        "allocation_stop_requested": _allocation_stop_event,
        "allocation_stop_withdrawn": _allocation_stop_event,
        "allocation_stop_acknowledged": _allocation_stop_event,
    },
    statements=statements,
    listed_events=frozenset(
        {
            "trial_created",
            "trial_ended",
            "trial_reopened",
            "trial_progress_reported",
            "trial_validation_reported",
        }
    ),
    polled_events={
        "allocation_stop_requested": "allocation",
        "allocation_stop_withdrawn": "allocation",
        "allocation_canceled": "allocation",
        "allocation_exited": "allocation",
        "trial_length_set": "trial",
        "trial_stop_requested": "trial",
    },
)
