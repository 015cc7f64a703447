"""Row building for the read models: pure functions from stored events to the
statements that apply them. No I/O, no clock: the projector shell runs the
plan inside one transaction.

Events are folded as today's shapes (`upcast`): an old log's
AllocationAssigned reads as the trial's AllocationRequested and an assignment.

Every statement writes absolute values keyed by the event's natural key
(experiment id, trial id, allocation id, checkpoint uuid, metric point), so
applying an event twice leaves the same rows as applying it once: replaying
the log twice, or a log in which every message is duplicated, gives the same
tables. (A trial's total_batches is a max over its points, lowered to the
resume point when a run is requested: max and min fold to the same value
however often and in whatever batches the log is applied.)

State strings have no prefix (ACTIVE, STOPPING_KILLED, COMPLETED, ...). A
trial's stored state is ACTIVE until it ends; the queries show RUNNING while
its current allocation has started and not exited (see queries.py).
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from determined.proto import events_pb2
from services.common.envelope import Envelope, aggregate, payload_of
from services.common.upcast import upcast

S = "read_model"
# The states (experiment or trial) after which nothing more happens.
TERMINAL_STATES = ("COMPLETED", "CANCELED", "ERROR")
_TERMINAL_SQL = ", ".join(f"'{state}'" for state in TERMINAL_STATES)

EXPERIMENT_CREATED = (
    f"INSERT INTO {S}.experiments (id, name, owner, state, started_at_ns, ended_at_ns, description,"
    " labels, resource_pool, searcher_name, searcher_metric, smaller_is_better, config_json,"
    " context_hash) VALUES ($1, $2, $3, $4, $5, NULL, $6, $7::jsonb, $8, $9, $10, $11, $12, $13)"
    " ON CONFLICT (id) DO NOTHING"
)
EXPERIMENT_STATE_CHANGED = (
    f"UPDATE {S}.experiments SET state = $2, ended_at_ns = CASE WHEN $3::bigint IS NULL THEN NULL"
    " ELSE COALESCE(ended_at_ns, $3::bigint) END, end_reason = $4 WHERE id = $1"
)
EXPERIMENT_KILL_REQUESTED = (
    f"UPDATE {S}.experiments SET state = 'STOPPING_KILLED'"
    f" WHERE id = $1 AND state NOT IN ({_TERMINAL_SQL})"
)
EXPERIMENT_PROGRESS = f"UPDATE {S}.experiments SET progress = $2 WHERE id = $1"
TRIAL_CREATED = (
    f"INSERT INTO {S}.trials (id, experiment_id, request_id, state, hparams_json, trial_seed,"
    " started_at_ns, ended_at_ns, end_reason, progress, total_batches, current_allocation_id, runs, rung,"
    " searcher_length, stop_reason, status, kill_requested, early_exit_reason, metadata_json)"
    " VALUES ($1, $2, $3, 'ACTIVE', $4, $5, $6, NULL, '', 0, 0, NULL, 0, 0, $7, NULL, '', false, NULL, '{}')"
    " ON CONFLICT (id) DO NOTHING"
)
TRIAL_ENDED = (
    f"UPDATE {S}.trials SET state = $2, end_reason = $3, ended_at_ns = COALESCE(ended_at_ns, $4),"
    " progress = CASE WHEN $2 = 'COMPLETED' THEN 1.0 ELSE progress END"
    " WHERE id = $1"
)
TRIAL_PROGRESS = f"UPDATE {S}.trials SET progress = $2 WHERE id = $1"
TRIAL_TOTAL_BATCHES = (
    f"UPDATE {S}.trials SET total_batches = GREATEST(total_batches, $2) WHERE id = $1"
)
TRIAL_LENGTH_SET = f"UPDATE {S}.trials SET rung = $2, searcher_length = $3 WHERE id = $1"
TRIAL_STOP_REQUESTED = f"UPDATE {S}.trials SET stop_reason = $2 WHERE id = $1"
TRIAL_STATUS = f"UPDATE {S}.trials SET status = $2 WHERE id = $1"
TRIAL_KILL_REQUESTED = f"UPDATE {S}.trials SET kill_requested = true WHERE id = $1"
# The first early exit a trial reported is the one that counts (the gateway
# stores one per trial); COALESCE keeps it absolute whatever follows.
TRIAL_EARLY_EXIT = (
    f"UPDATE {S}.trials SET early_exit_reason = COALESCE(early_exit_reason, $2) WHERE id = $1"
)
# Metadata is replaced whole: the last one set is the trial's.
TRIAL_METADATA_SET = f"UPDATE {S}.trials SET metadata_json = $2 WHERE id = $1"
CHECKPOINT_REPORTED = (
    f"INSERT INTO {S}.checkpoints (uuid, trial_id, experiment_id, allocation_id, steps_completed,"
    " metadata_json, resources, reported_at_ns, state)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, 'COMPLETED') ON CONFLICT (uuid) DO UPDATE SET"
    " trial_id = excluded.trial_id, experiment_id = excluded.experiment_id,"
    " allocation_id = excluded.allocation_id, steps_completed = excluded.steps_completed,"
    " metadata_json = excluded.metadata_json, resources = excluded.resources,"
    " reported_at_ns = excluded.reported_at_ns"
)
AGENT_REGISTERED = (
    f"INSERT INTO {S}.agents (agent_id, hostname, slots, registered_at_ns)"
    " VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (agent_id) DO UPDATE SET"
    " hostname = excluded.hostname, slots = excluded.slots, registered_at_ns = excluded.registered_at_ns"
)
ALLOCATION_REQUESTED = (
    f"INSERT INTO {S}.allocations (allocation_id, trial_id, trial_run_id, requested_at_ns, stop_requested,"
    " stop_acknowledged, canceled, killed, agent_lost) VALUES ($1, $2, $3, $4, false, false, false, false, false)"
    " ON CONFLICT (allocation_id) DO NOTHING"
)
# The trial's newest run; the steps past its resume point are trained again,
# so they no longer count as batches the trial got through.
TRIAL_RUN_REQUESTED = (
    f"UPDATE {S}.trials SET current_allocation_id = $2, runs = $3, total_batches = LEAST(total_batches, $4)"
    " WHERE id = $1"
)
# Determined archives the metrics a resumed run reports again; here they stay,
# marked, so that every step is shown once.
METRICS_SUPERSEDED = (
    f"UPDATE {S}.metrics SET superseded = true"
    " WHERE trial_id = $1 AND trial_run_id < $2 AND steps_completed > $3 AND NOT superseded"
)
ALLOCATION_ASSIGNED = (
    f"UPDATE {S}.allocations SET placements = $2::jsonb, assigned_at_ns = COALESCE(assigned_at_ns, $3)"
    " WHERE allocation_id = $1"
)
ALLOCATION_STARTED = (
    f"UPDATE {S}.allocations SET started_at_ns = COALESCE(started_at_ns, $2) WHERE allocation_id = $1"
)
ALLOCATION_STOP_REQUESTED = (
    f"UPDATE {S}.allocations SET stop_requested = true, stop_reason = COALESCE(stop_reason, $2)"
    " WHERE allocation_id = $1"
)
ALLOCATION_STOP_ACKNOWLEDGED = f"UPDATE {S}.allocations SET stop_acknowledged = true WHERE allocation_id = $1"
ALLOCATION_CANCELED = f"UPDATE {S}.allocations SET canceled = true WHERE allocation_id = $1"
ALLOCATION_EXITED = (
    f"UPDATE {S}.allocations SET exited_at_ns = COALESCE(exited_at_ns, $2), exit_code = $3,"
    " killed = $4, error = $5, agent_lost = $6 WHERE allocation_id = $1"
)
# unnest() makes one statement of a whole batch of metric points (INFRA-NOTES:
# ~215,000 rows/s); ON CONFLICT keeps a replayed point absolute, and a point
# once superseded stays so.
METRICS_UPSERT = (
    f'INSERT INTO {S}.metrics (trial_id, "group", steps_completed, trial_run_id, metrics,'
    " reported_at_ns, superseded) SELECT t, g, s, r, m::jsonb, a, x FROM unnest($1::bigint[], $2::text[],"
    " $3::bigint[], $4::int[], $5::text[], $6::bigint[], $7::boolean[]) AS u(t, g, s, r, m, a, x)"
    ' ON CONFLICT (trial_id, "group", steps_completed, trial_run_id) DO UPDATE SET'
    " metrics = excluded.metrics, reported_at_ns = excluded.reported_at_ns,"
    f" superseded = {S}.metrics.superseded OR excluded.superseded"
)

Args = tuple[Any, ...]
MetricKey = tuple[int, str, int, int]
# The columns of a metric row after its key: metrics, reported_at_ns, superseded.
_SUPERSEDED = 6


@dataclass
class Plan:
    """What one batch of events does to the read models, in order."""

    statements: list[tuple[str, Args]] = field(default_factory=list)
    # The newest value of each metric point in the batch (one upsert may not
    # touch a row twice).
    metric_rows: dict[MetricKey, Args] = field(default_factory=dict)
    total_batches: dict[int, int] = field(default_factory=dict)

    def metric_columns(self) -> list[list[Any]]:
        """The metric rows as one list per column, for the unnest() upsert."""
        return [list(column) for column in zip(*self.metric_rows.values(), strict=True)]


def plan_batch(envelopes: Iterable[Envelope]) -> Plan:
    plan = Plan()
    for envelope in envelopes:
        for event in upcast(envelope):
            apply_event(plan, event)
    return plan


def apply_event(plan: Plan, envelope: Envelope) -> None:
    payload = payload_of(envelope)
    at = envelope.occurred_at_ns
    match payload:
        case events_pb2.TrialMetricsReported():
            for report in payload.reports:
                key = (payload.trial_id, report.group, report.steps_completed, payload.trial_run_id)
                _metric_point(plan, key, report.metrics_json, report.reported_at_ns or at)
        case events_pb2.TrialValidationReported():
            key = (payload.trial_id, "validation", payload.steps_completed, payload.trial_run_id)
            _metric_point(plan, key, payload.metrics_json, payload.reported_at_ns or at)
        case events_pb2.ExperimentCreated():
            plan.statements.append((EXPERIMENT_CREATED, experiment_row(payload, at)))
        case events_pb2.ExperimentStateChanged():
            state = state_name(events_pb2.ExperimentState.Name(payload.state))
            ended_at = at if state in TERMINAL_STATES else None
            ended = (payload.experiment_id, state, ended_at, payload.reason)
            plan.statements.append((EXPERIMENT_STATE_CHANGED, ended))
        case events_pb2.ExperimentKillRequested():
            plan.statements.append((EXPERIMENT_KILL_REQUESTED, (payload.experiment_id,)))
        case events_pb2.ExperimentProgressChanged():
            plan.statements.append((EXPERIMENT_PROGRESS, (payload.experiment_id, payload.progress)))
        case events_pb2.CheckpointReported():
            plan.statements.append((CHECKPOINT_REPORTED, checkpoint_row(payload, at)))
        case events_pb2.AgentRegistered():
            slots = json.dumps([_slot(s) for s in payload.slots])
            plan.statements.append((AGENT_REGISTERED, (payload.agent_id, payload.hostname, slots, at)))
        case _:
            _trial_event(plan, payload, at)


def _trial_event(plan: Plan, payload: object, at: int) -> None:
    match payload:
        case events_pb2.TrialCreated():
            row = (payload.trial_id, payload.experiment_id, payload.request_id, payload.hparams_json,
                   payload.trial_seed, at, payload.length)
            plan.statements.append((TRIAL_CREATED, row))
        case events_pb2.TrialEnded():
            state = state_name(events_pb2.TrialState.Name(payload.state))
            plan.statements.append((TRIAL_ENDED, (payload.trial_id, state, payload.reason, at)))
        case events_pb2.TrialProgressReported():
            plan.statements.append((TRIAL_PROGRESS, (payload.trial_id, payload.progress)))
        case events_pb2.TrialLengthSet():
            plan.statements.append((TRIAL_LENGTH_SET, (payload.trial_id, payload.rung, payload.length)))
        case events_pb2.TrialStopRequested():
            plan.statements.append((TRIAL_STOP_REQUESTED, (payload.trial_id, payload.reason)))
        case events_pb2.TrialStatusReported():
            plan.statements.append((TRIAL_STATUS, (payload.trial_id, payload.status)))
        case events_pb2.TrialKillRequested():
            plan.statements.append((TRIAL_KILL_REQUESTED, (payload.trial_id,)))
        case events_pb2.TrialEarlyExitReported():
            plan.statements.append((TRIAL_EARLY_EXIT, (payload.trial_id, payload.reason)))
        case events_pb2.TrialMetadataSet():
            plan.statements.append((TRIAL_METADATA_SET, (payload.trial_id, payload.metadata_json or "{}")))
        case _:
            _allocation_event(plan, payload, at)


def _allocation_event(plan: Plan, payload: object, at: int) -> None:
    match payload:
        case events_pb2.AllocationRequested() if payload.HasField("trial"):
            _run_requested(plan, payload, at)
        case events_pb2.AllocationAssigned():
            placements = json.dumps([_placement(p) for p in payload.placements])
            plan.statements.append((ALLOCATION_ASSIGNED, (payload.allocation_id, placements, at)))
        case events_pb2.AllocationStarted():
            plan.statements.append((ALLOCATION_STARTED, (payload.allocation_id, at)))
        case events_pb2.AllocationStopRequested():
            plan.statements.append((ALLOCATION_STOP_REQUESTED, (payload.allocation_id, payload.reason)))
        case events_pb2.AllocationStopAcknowledged():
            plan.statements.append((ALLOCATION_STOP_ACKNOWLEDGED, (payload.allocation_id,)))
        case events_pb2.AllocationCanceled():
            plan.statements.append((ALLOCATION_CANCELED, (payload.allocation_id,)))
        case events_pb2.AllocationExited():
            exited: Args = (payload.allocation_id, at, payload.exit_code, payload.killed, payload.error,
                            payload.agent_lost)
            plan.statements.append((ALLOCATION_EXITED, exited))
        case _:
            pass  # kill requests and event types this code does not know change no row


def _run_requested(plan: Plan, payload: events_pb2.AllocationRequested, at: int) -> None:
    """A trial's next run: the allocation's row, the trial's current run, and
    the earlier runs' points past the resume point superseded, those already
    stored (a statement) and those earlier in this batch (their rows here).
    Points reported after the request are never superseded by it, however the
    log is cut into batches."""
    launch = payload.trial
    trial_id, run_id, resumed_at = launch.trial_id, launch.trial_run_id, launch.steps_completed
    plan.statements.append((ALLOCATION_REQUESTED, (payload.allocation_id, trial_id, run_id, at)))
    plan.statements.append((TRIAL_RUN_REQUESTED, (trial_id, payload.allocation_id, run_id, resumed_at)))
    plan.statements.append((METRICS_SUPERSEDED, (trial_id, run_id, resumed_at)))
    for key, row in plan.metric_rows.items():
        if key[0] == trial_id and key[3] < run_id and key[2] > resumed_at:
            plan.metric_rows[key] = (*row[:_SUPERSEDED], True)
    if trial_id in plan.total_batches:
        plan.total_batches[trial_id] = min(plan.total_batches[trial_id], resumed_at)


def watched(envelopes: Iterable[Envelope]) -> set[str]:
    """The aggregates whose watched state these events change: an allocation's
    stop request or its end, a trial's searcher length or stop. The projector
    wakes the WatchAllocation calls waiting on them once they are stored."""
    found: set[str] = set()
    for envelope in envelopes:
        payload = payload_of(envelope)
        match payload:
            case (
                events_pb2.AllocationStopRequested()
                | events_pb2.AllocationCanceled()
                | events_pb2.AllocationExited()
            ):
                found.add(aggregate("allocation", payload.allocation_id))
            case events_pb2.TrialLengthSet() | events_pb2.TrialStopRequested():
                found.add(aggregate("trial", payload.trial_id))
    return found


def state_name(enum_name: str) -> str:
    """EXPERIMENT_STATE_ACTIVE -> ACTIVE, TRIAL_STATE_COMPLETED -> COMPLETED."""
    for prefix in ("EXPERIMENT_STATE_", "TRIAL_STATE_"):
        if enum_name.startswith(prefix):
            return enum_name[len(prefix):]
    return enum_name


def experiment_row(payload: events_pb2.ExperimentCreated, at: int) -> Args:
    config = _json_object(payload.config_json)
    searcher = config.get("searcher") or {}
    resources = config.get("resources") or {}
    return (
        payload.experiment_id,
        payload.name,
        payload.owner,
        "ACTIVE" if payload.activate else "PAUSED",
        at,
        str(config.get("description") or ""),
        json.dumps(list(config.get("labels") or [])),
        str(resources.get("resource_pool") or ""),
        str(searcher.get("name") or ""),
        str(searcher.get("metric") or ""),
        bool(searcher.get("smaller_is_better", True)),
        payload.config_json,
        payload.context_hash,
    )


def checkpoint_row(payload: events_pb2.CheckpointReported, at: int) -> Args:
    return (
        payload.uuid,
        payload.trial_id,
        payload.experiment_id,
        payload.allocation_id,
        payload.steps_completed,
        payload.metadata_json,
        json.dumps(dict(sorted(payload.resources.items()))),
        payload.reported_at_ns or at,
    )


def _metric_point(plan: Plan, key: MetricKey, metrics_json: str, reported_at_ns: int) -> None:
    """One metric point; a point repeated in the batch keeps its newest value
    and its place among the batch's rows moves to the end (report order)."""
    earlier = plan.metric_rows.pop(key, None)
    superseded = earlier is not None and earlier[_SUPERSEDED]
    plan.metric_rows[key] = (*key, metrics_json or "{}", reported_at_ns, superseded)
    trial_id = key[0]
    plan.total_batches[trial_id] = max(plan.total_batches.get(trial_id, 0), key[2])


def _slot(slot: events_pb2.Slot) -> dict[str, object]:
    return {"slot_id": slot.slot_id, "type": slot.type, "device": slot.device}


def _placement(placement: events_pb2.Placement) -> dict[str, object]:
    return {"agent_id": placement.agent_id, "slot_ids": list(placement.slot_ids)}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
