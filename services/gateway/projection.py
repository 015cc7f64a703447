"""Row building for the read models: pure functions from stored events to the
statements that apply them. No I/O, no clock: the projector shell runs the
plan inside one transaction.

Every statement writes absolute values keyed by the event's natural key
(experiment id, trial id, allocation id, checkpoint uuid, metric point), so
applying an event twice leaves the same rows as applying it once: replaying
the log twice, or a log in which every message is duplicated, gives the same
tables.

State strings have no prefix (ACTIVE, STOPPING_KILLED, COMPLETED, ...). A
trial's stored state is ACTIVE until it ends; the queries show RUNNING while
its current allocation has started and not exited (see queries.py).
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from determined.proto import events_pb2
from services.common.envelope import Envelope, payload_of

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
TRIAL_CREATED = (
    f"INSERT INTO {S}.trials (id, experiment_id, request_id, state, hparams_json, trial_seed,"
    " started_at_ns, ended_at_ns, end_reason, progress, total_batches, current_allocation_id)"
    " VALUES ($1, $2, $3, 'ACTIVE', $4, $5, $6, NULL, '', 0, 0, NULL) ON CONFLICT (id) DO NOTHING"
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
ALLOCATION_ASSIGNED = (
    f"INSERT INTO {S}.allocations (allocation_id, trial_id, trial_run_id, agent_id, slot_ids,"
    " assigned_at_ns) VALUES ($1, $2, $3, $4, $5::jsonb, $6) ON CONFLICT (allocation_id) DO NOTHING"
)
TRIAL_CURRENT_ALLOCATION = f"UPDATE {S}.trials SET current_allocation_id = $2 WHERE id = $1"
ALLOCATION_STARTED = (
    f"UPDATE {S}.allocations SET started_at_ns = COALESCE(started_at_ns, $2) WHERE allocation_id = $1"
)
ALLOCATION_EXITED = (
    f"UPDATE {S}.allocations SET exited_at_ns = COALESCE(exited_at_ns, $2), exit_code = $3,"
    " killed = $4, error = $5 WHERE allocation_id = $1"
)
# unnest() makes one statement of a whole batch of metric points (INFRA-NOTES:
# ~215,000 rows/s); ON CONFLICT keeps a replayed point absolute.
METRICS_UPSERT = (
    f'INSERT INTO {S}.metrics (trial_id, "group", steps_completed, trial_run_id, metrics,'
    " reported_at_ns) SELECT t, g, s, r, m::jsonb, a FROM unnest($1::bigint[], $2::text[],"
    " $3::bigint[], $4::int[], $5::text[], $6::bigint[]) AS u(t, g, s, r, m, a)"
    ' ON CONFLICT (trial_id, "group", steps_completed, trial_run_id) DO UPDATE SET'
    " metrics = excluded.metrics, reported_at_ns = excluded.reported_at_ns"
)

Args = tuple[Any, ...]
MetricKey = tuple[int, str, int, int]


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
        apply_event(plan, envelope)
    return plan


def apply_event(plan: Plan, envelope: Envelope) -> None:
    payload = payload_of(envelope)
    at = envelope.occurred_at_ns
    match payload:
        case events_pb2.TrialMetricsReported():
            _metrics(plan, payload, at)
        case events_pb2.ExperimentCreated():
            plan.statements.append((EXPERIMENT_CREATED, experiment_row(payload, at)))
        case events_pb2.ExperimentStateChanged():
            state = state_name(events_pb2.ExperimentState.Name(payload.state))
            ended_at = at if state in TERMINAL_STATES else None
            ended = (payload.experiment_id, state, ended_at, payload.reason)
            plan.statements.append((EXPERIMENT_STATE_CHANGED, ended))
        case events_pb2.ExperimentKillRequested():
            plan.statements.append((EXPERIMENT_KILL_REQUESTED, (payload.experiment_id,)))
        case events_pb2.TrialCreated():
            row = (payload.trial_id, payload.experiment_id, payload.request_id, payload.hparams_json,
                   payload.trial_seed, at)
            plan.statements.append((TRIAL_CREATED, row))
        case events_pb2.TrialEnded():
            state = state_name(events_pb2.TrialState.Name(payload.state))
            plan.statements.append((TRIAL_ENDED, (payload.trial_id, state, payload.reason, at)))
        case events_pb2.TrialProgressReported():
            plan.statements.append((TRIAL_PROGRESS, (payload.trial_id, payload.progress)))
        case events_pb2.CheckpointReported():
            plan.statements.append((CHECKPOINT_REPORTED, checkpoint_row(payload, at)))
        case events_pb2.AgentRegistered():
            slots = json.dumps([_slot(s) for s in payload.slots])
            plan.statements.append((AGENT_REGISTERED, (payload.agent_id, payload.hostname, slots, at)))
        case _:
            _allocation_event(plan, payload, at)


def _allocation_event(plan: Plan, payload: object, at: int) -> None:
    match payload:
        case events_pb2.AllocationAssigned():
            assigned: Args = (payload.allocation_id, payload.trial_id, payload.trial_run_id, payload.agent_id,
                              json.dumps(list(payload.slot_ids)), at)
            plan.statements.append((ALLOCATION_ASSIGNED, assigned))
            plan.statements.append((TRIAL_CURRENT_ALLOCATION, (payload.trial_id, payload.allocation_id)))
        case events_pb2.AllocationStarted():
            plan.statements.append((ALLOCATION_STARTED, (payload.allocation_id, at)))
        case events_pb2.AllocationExited():
            exited: Args = (payload.allocation_id, at, payload.exit_code, payload.killed, payload.error)
            plan.statements.append((ALLOCATION_EXITED, exited))
        case _:
            pass  # kill requests and event types this code does not know change no row


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


def _metrics(plan: Plan, payload: events_pb2.TrialMetricsReported, at: int) -> None:
    trial_id, run_id = payload.trial_id, payload.trial_run_id
    for report in payload.reports:
        key = (trial_id, report.group, report.steps_completed, run_id)
        plan.metric_rows.pop(key, None)  # keep the batch's rows in report order
        plan.metric_rows[key] = (*key, report.metrics_json or "{}", report.reported_at_ns or at)
        plan.total_batches[trial_id] = max(plan.total_batches.get(trial_id, 0), report.steps_completed)


def _slot(slot: events_pb2.Slot) -> dict[str, object]:
    return {"slot_id": slot.slot_id, "type": slot.type, "device": slot.device}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
