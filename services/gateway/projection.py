"""Row building for the read models: pure functions from stored events to the
rows they leave. No I/O, no clock: the projector shell loads the rows a batch
of events touches, folds the batch over them here (`Plan.rows`), and writes
the result back with one statement per table, in one transaction. So a batch
of a thousand events costs a dozen round trips to PostgreSQL, whatever its
mix of events, instead of one per run of a statement.

Events are folded as today's shapes (`upcast`): an old log's
AllocationAssigned reads as the trial's AllocationRequested and an assignment.

Every rule writes absolute values keyed by the event's natural key
(experiment id, trial id, allocation id, checkpoint uuid, metric point), so
applying an event twice leaves the same rows as applying it once: replaying
the log twice, or a log in which every message is duplicated, gives the same
tables. A creation keeps the row that exists (the first one wins); a change
of a row that does not exist changes nothing. (A trial's total_batches is a
max over its points, lowered to the resume point when a run is requested:
max and min fold to the same value however often and in whatever batches the
log is applied.)

Deletion follows the same rule: a checkpoint's deletion outcome applies
unless a newer deletion (by its deletion_id) has named the checkpoint since,
and an experiment's deletion requests are kept as the set of their event ids
(their number numbers the next request), so a request applied twice counts once.

A trial's best metric (its experiment's searcher metric over the validations
shown) and its experiment's (the best of its trials') are kept by the two
metric statements instead of the fold: a stored validation raises them (min or
max, so they too fold the same however often applied), and a resumed run that
supersedes a validation has its trial's counted again over the stored ones,
which no fold over one row can do.

State strings have no prefix (ACTIVE, STOPPING_KILLED, COMPLETED, ...). A
trial's stored state is ACTIVE until it ends; the queries show RUNNING while
its current allocation has started and not exited (see queries.py).
"""

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, Boolean, Double, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from determined.proto import events_pb2
from services.common.envelope import Envelope, aggregate
from services.common.upcast import upcast
from services.gateway import tables

S = tables.SCHEMA
# The states (experiment or trial) after which nothing more happens.
TERMINAL_STATES = ("COMPLETED", "CANCELED", "ERROR")
# An ended experiment's deletion (`det experiment delete`): asked, failed (files
# are left; it may be asked again), done (gone from listings).
DELETION_STATES = ("DELETING", "DELETE_FAILED", "DELETED")
# The experiment states in which it runs no more: ended, or being (or been) deleted.
ENDED_STATES = (*TERMINAL_STATES, *DELETION_STATES)
# A deletion may be asked from these states (Determined's ExperimentTransitions).
DELETABLE_STATES = (*TERMINAL_STATES, "DELETE_FAILED")

Row = dict[str, Any]
Args = tuple[Any, ...]
MetricKey = tuple[int, str, int, int]
# What one event does to one row, as data (a plan is pickled: see replay.py):
# the name of an operation in _OPERATIONS and its arguments after the row.
Change = tuple[str, tuple[Any, ...]]

# The tables a batch loads, folds and writes back, by their key column.
ROW_TABLES: dict[str, Table] = {
    table.name: table
    for table in (
        tables.experiments,
        tables.trials,
        tables.allocations,
        tables.checkpoints,
        tables.agents,
        tables.models,
        tables.model_versions,
        tables.users,
        tables.user_sessions,
    )
}

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
# The columns of a metric row after its key: metrics, reported_at_ns, superseded.
_SUPERSEDED = 6


@dataclass
class Plan:
    """What one batch of events does to the read models."""

    # In the order of the events: (table, key, change).
    changes: list[tuple[str, Any, Change]] = field(default_factory=list)
    # The newest value of each metric point in the batch (one upsert may not
    # touch a row twice).
    metric_rows: dict[MetricKey, Args] = field(default_factory=dict)
    # (trial_id, trial_run_id, resumed_at) of each run requested: the stored
    # points of earlier runs past its resume point are superseded.
    superseded: list[Args] = field(default_factory=list)
    # A trial's highest point in the batch, lowered by a later resume.
    total_batches: dict[int, int] = field(default_factory=dict)
    # Trial id -> the keys of its points in metric_rows.
    trial_points: dict[int, set[MetricKey]] = field(default_factory=dict)

    def keys(self) -> dict[str, list[Any]]:
        """The keys of the rows the batch changes, per table: the rows to load."""
        keys: dict[str, dict[Any, None]] = {}
        for table, key, _ in self.changes:
            keys.setdefault(table, {})[key] = None
        for trial_id in self.total_batches:
            keys.setdefault("trials", {})[trial_id] = None
        return {table: list(found) for table, found in keys.items()}

    def rows(self, stored: Mapping[str, Mapping[Any, Row]]) -> dict[str, list[Row]]:
        """Folds the batch over the `stored` rows it touches (table -> key ->
        row; a key that is missing has no row); returns, per table, the rows
        that differ from the stored ones, to be written back whole."""
        current: dict[str, dict[Any, Row | None]] = {table: {} for table in ROW_TABLES}
        for table, key, (operation, arguments) in self.changes:
            rows = current[table]
            row = rows[key] if key in rows else _copy(stored.get(table, {}).get(key))
            rows[key] = _OPERATIONS[operation](row, *arguments)
        trials = current["trials"]
        for trial_id, batches in self.total_batches.items():
            row = trials[trial_id] if trial_id in trials else _copy(stored.get("trials", {}).get(trial_id))
            if row is not None:
                row["total_batches"] = max(row["total_batches"], batches)
            trials[trial_id] = row
        return {
            table: [
                row for key, row in rows.items() if row is not None and row != stored.get(table, {}).get(key)
            ]
            for table, rows in current.items()
        }

    def metric_columns(self) -> list[list[Any]]:
        """The metric rows as one list per column, for the unnest() upsert."""
        return [list(column) for column in zip(*self.metric_rows.values(), strict=True)]

    def change(self, table: str, key: Any, change: Change) -> None:
        self.changes.append((table, key, change))


@dataclass(frozen=True)
class PlannedBatch:
    """The plan of the events `first` to `last` (made by the replay helper:
    replay.py), and the aggregates whose watched state they change."""

    first: int
    last: int
    plan: Plan
    watched: set[str]


def _copy(row: Row | None) -> Row | None:
    return None if row is None else dict(row)


def plan_batch(envelopes: Iterable[Envelope]) -> Plan:
    plan = Plan()
    for envelope in envelopes:
        field_name = envelope.WhichOneof("payload")
        if field_name == "allocation_assigned" and envelope.allocation_assigned.config_json:
            for event in upcast(envelope):
                apply_event(plan, event)
        elif (rule := _RULES.get(field_name or "")) is not None:  # the same as apply_event, faster
            rule(plan, getattr(envelope, field_name or ""), envelope.occurred_at_ns)
        elif (envelope_rule := _ENVELOPE_RULES.get(field_name or "")) is not None:
            envelope_rule(plan, envelope)
    return plan


# -- the rules, one event at a time --------------------------------------------


def created(new: Row) -> Change:
    """Creates the row unless it exists (a replayed creation keeps the first)."""
    return "create", (new,)


def replaced(new: Row, kept: tuple[str, ...] = ()) -> Change:
    """Creates the row, or replaces every column of it but `kept`."""
    return "replace", (new, kept)


def updated(**values: Any) -> Change:
    """Sets these columns of the row, if it exists."""
    return "set", (values,)


def first(**values: Any) -> Change:
    """Sets these columns of the row where they are still NULL (the first
    value stays: COALESCE)."""
    return "first", (values,)


def _create(row: Row | None, new: Row) -> Row | None:
    return dict(new) if row is None else row


def _replace(row: Row | None, new: Row, kept: tuple[str, ...]) -> Row | None:
    return dict(new) if row is None else {**new, **{column: row[column] for column in kept}}


def _set(row: Row | None, values: dict[str, Any]) -> Row | None:
    if row is not None:
        row.update(values)
    return row


def _first(row: Row | None, values: dict[str, Any]) -> Row | None:
    if row is not None:
        for column, value in values.items():
            if row[column] is None:
                row[column] = value
    return row


def _set_experiment_state(row: Row | None, state: str, at: int, reason: str) -> Row | None:
    """The new state and why; a terminal state's end time is the first one's."""
    if row is not None:
        row["state"] = state
        terminal = state in TERMINAL_STATES
        row["ended_at_ns"] = (
            (row["ended_at_ns"] if row["ended_at_ns"] is not None else at) if terminal else None
        )
        row["end_reason"] = reason
    return row


def _kill_experiment(row: Row | None) -> Row | None:
    """STOPPING_KILLED, unless it has ended already (or is being deleted)."""
    if row is not None and row["state"] not in ENDED_STATES:
        row["state"] = "STOPPING_KILLED"
    return row


def _end_trial(row: Row | None, state: str, reason: str, at: int) -> Row | None:
    if row is not None:
        row["state"] = state
        row["end_reason"] = reason
        if row["ended_at_ns"] is None:
            row["ended_at_ns"] = at
        if state == "COMPLETED":
            row["progress"] = 1.0
    return row


def _set_current_run(row: Row | None, allocation_id: str, run_id: int, resumed_at: int) -> Row | None:
    """The trial's newest run; the steps past its resume point are trained
    again, so they no longer count as batches the trial got through."""
    if row is not None:
        row["current_allocation_id"] = allocation_id
        row["runs"] = run_id
        row["total_batches"] = min(row["total_batches"], resumed_at)
    return row


def _lose_agent(row: Row | None, registration_event_id: str) -> Row | None:
    """Lost, when the registration found lost is its current one (a newer
    registration may be stored before the scheduler's verdict on the old one)."""
    if row is not None and row["registration_event_id"] == registration_event_id:
        row["lost"] = True
    return row


def _set_resources(row: Row | None, changes: dict[str, Any]) -> Row | None:
    if row is not None:
        config = _json_object(row["config_json"])
        config["resources"] = {**(config.get("resources") or {}), **changes}
        row["config_json"] = json.dumps(config, sort_keys=True)
    return row


def _set_gc_policy(row: Row | None, policy: dict[str, int]) -> Row | None:
    """The stored config's checkpoint_storage section shows the new policy."""
    if row is not None:
        config = _json_object(row["config_json"])
        config["checkpoint_storage"] = {**(config.get("checkpoint_storage") or {}), **policy}
        row["config_json"] = json.dumps(config, sort_keys=True)
    return row


def _ask_experiment_deletion(row: Row | None, request_id: str) -> Row | None:
    """DELETING, from an ended or DELETE_FAILED experiment (from any other
    state the state stays). The request counts once however often it is
    applied: its event id joins the set of requests."""
    if row is not None:
        requests = set(json.loads(row["delete_requests"])) | {request_id}
        row["delete_requests"] = json.dumps(sorted(requests))
        if row["state"] in DELETABLE_STATES:
            row["state"] = "DELETING"
            row["delete_error"] = ""
    return row


def _fail_experiment_deletion(row: Row | None, reason: str) -> Row | None:
    if row is not None and row["state"] == "DELETING":
        row["state"] = "DELETE_FAILED"
        row["delete_error"] = reason
    return row


def _report_checkpoint(row: Row | None, new: Row) -> Row | None:
    """A checkpoint's report: a new row, or the stored one replaced but for
    its state; once a deletion named it, a repeated report changes nothing."""
    if row is None:
        return dict(new)
    if row["deletion_id"]:
        return row
    return {**new, "state": row["state"]}


def _request_checkpoint_deletion(row: Row | None, deletion_id: int) -> Row | None:
    """DELETING, when this deletion is newer than the last that named it (and
    the checkpoint is not gone already)."""
    if row is not None and deletion_id > row["deletion_id"] and row["state"] != "DELETED":
        row["state"] = "DELETING"
        row["deletion_id"] = deletion_id
        row["delete_error"] = ""
    return row


def _settle_checkpoint_deletion(
    row: Row | None, deletion_id: int, state: str, remaining: str, error: str
) -> Row | None:
    """What a deletion left (`remaining`: the resources' JSON), unless a newer
    deletion has named the checkpoint since."""
    if row is not None and deletion_id >= row["deletion_id"]:
        row.update(state=state, resources=remaining, delete_error=error, deletion_id=deletion_id)
    return row


_OPERATIONS: dict[str, Callable[..., Row | None]] = {
    "create": _create,
    "replace": _replace,
    "set": _set,
    "first": _first,
    "set_experiment_state": _set_experiment_state,
    "kill_experiment": _kill_experiment,
    "end_trial": _end_trial,
    "set_current_run": _set_current_run,
    "lose_agent": _lose_agent,
    "set_resources": _set_resources,
    "set_gc_policy": _set_gc_policy,
    "ask_experiment_deletion": _ask_experiment_deletion,
    "fail_experiment_deletion": _fail_experiment_deletion,
    "report_checkpoint": _report_checkpoint,
    "request_checkpoint_deletion": _request_checkpoint_deletion,
    "settle_checkpoint_deletion": _settle_checkpoint_deletion,
}


def apply_event(plan: Plan, envelope: Envelope) -> None:
    """Adds what one event does to the plan; an event type this code does
    not know (or one that changes no row: kill requests) adds nothing."""
    field_name = envelope.WhichOneof("payload")
    rule = _RULES.get(field_name or "")
    if rule is not None:
        rule(plan, getattr(envelope, field_name or ""), envelope.occurred_at_ns)
    elif (envelope_rule := _ENVELOPE_RULES.get(field_name or "")) is not None:
        envelope_rule(plan, envelope)


def _metrics_reported(plan: Plan, payload: events_pb2.TrialMetricsReported, at: int) -> None:
    trial_id, run_id = payload.trial_id, payload.trial_run_id
    for report in payload.reports:
        key = (trial_id, report.group, report.steps_completed, run_id)
        _metric_point(plan, key, report.metrics_json, report.reported_at_ns or at)


def _validation_reported(plan: Plan, payload: events_pb2.TrialValidationReported, at: int) -> None:
    key = (payload.trial_id, "validation", payload.steps_completed, payload.trial_run_id)
    _metric_point(plan, key, payload.metrics_json, payload.reported_at_ns or at)


def _experiment_created(plan: Plan, payload: events_pb2.ExperimentCreated, at: int) -> None:
    plan.change("experiments", payload.experiment_id, created(experiment_row(payload, at)))


def _experiment_state_changed(plan: Plan, payload: events_pb2.ExperimentStateChanged, at: int) -> None:
    state = state_name(events_pb2.ExperimentState.Name(payload.state))
    plan.change("experiments", payload.experiment_id, ("set_experiment_state", (state, at, payload.reason)))


def _experiment_kill_requested(plan: Plan, payload: events_pb2.ExperimentKillRequested, at: int) -> None:
    plan.change("experiments", payload.experiment_id, ("kill_experiment", ()))


def _experiment_progress_changed(plan: Plan, payload: events_pb2.ExperimentProgressChanged, at: int) -> None:
    plan.change("experiments", payload.experiment_id, updated(progress=payload.progress))


def _checkpoint_reported(plan: Plan, payload: events_pb2.CheckpointReported, at: int) -> None:
    plan.change("checkpoints", payload.uuid, ("report_checkpoint", (checkpoint_row(payload, at),)))


def _checkpoint_gc_policy_changed(plan: Plan, payload: events_pb2.CheckpointGcPolicyChanged, at: int) -> None:
    policy = {
        "save_experiment_best": payload.save_experiment_best,
        "save_trial_best": payload.save_trial_best,
        "save_trial_latest": payload.save_trial_latest,
    }
    plan.change("experiments", payload.experiment_id, ("set_gc_policy", (policy,)))


def _experiment_delete_requested(plan: Plan, envelope: Envelope) -> None:
    experiment_id = envelope.experiment_delete_requested.experiment_id
    plan.change("experiments", experiment_id, ("ask_experiment_deletion", (envelope.event_id,)))


def _experiment_deleted(plan: Plan, payload: events_pb2.ExperimentDeleted, at: int) -> None:
    plan.change("experiments", payload.experiment_id, updated(state="DELETED", delete_error=""))


def _experiment_delete_failed(plan: Plan, payload: events_pb2.ExperimentDeleteFailed, at: int) -> None:
    plan.change("experiments", payload.experiment_id, ("fail_experiment_deletion", (payload.reason,)))


def _checkpoint_deletion_requested(
    plan: Plan, payload: events_pb2.CheckpointDeletionRequested, at: int
) -> None:
    for uuid in payload.uuids:
        plan.change("checkpoints", uuid, ("request_checkpoint_deletion", (payload.deletion_id,)))


def _checkpoint_deleted(plan: Plan, payload: events_pb2.CheckpointDeleted, at: int) -> None:
    settled = (payload.deletion_id, "DELETED", "{}", "")
    plan.change("checkpoints", payload.uuid, ("settle_checkpoint_deletion", settled))


def _checkpoint_partially_deleted(
    plan: Plan, payload: events_pb2.CheckpointPartiallyDeleted, at: int
) -> None:
    remaining = _resources_json(payload.remaining)
    settled = (payload.deletion_id, "PARTIALLY_DELETED", remaining, payload.error)
    plan.change("checkpoints", payload.uuid, ("settle_checkpoint_deletion", settled))


def _model_created(plan: Plan, payload: events_pb2.ModelCreated, at: int) -> None:
    row = {
        "name": payload.name,
        "model_id": payload.model_id,
        "description": payload.description,
        "metadata_json": payload.metadata_json or "{}",
        "labels": json.dumps(list(payload.labels)),
        "owner": payload.owner,
        "created_at_ns": at,
    }
    plan.change("models", payload.name, created(row))


def _model_version_registered(plan: Plan, payload: events_pb2.ModelVersionRegistered, at: int) -> None:
    version_id = model_version_id(payload.model_name, payload.version)
    row = {
        "id": version_id,
        "model_name": payload.model_name,
        "model_id": payload.model_id,
        "version": payload.version,
        "checkpoint_uuid": payload.checkpoint_uuid,
        "experiment_id": payload.experiment_id,
        "trial_id": payload.trial_id,
        "name": payload.name,
        "comment": payload.comment,
        "owner": payload.owner,
        "registered_at_ns": at,
    }
    plan.change("model_versions", version_id, created(row))


def model_version_id(model_name: str, version: int) -> str:
    """How a checkpoint names a model version it is registered as."""
    return f"{model_name}:{version}"


def _user_created(plan: Plan, payload: events_pb2.UserCreated, at: int) -> None:
    row = {
        "user_id": payload.user_id,
        "username": payload.username,
        "display_name": payload.display_name,
        "admin": payload.admin,
        "active": payload.active,
        "created_at_ns": at,
        "created_by": payload.created_by,
        "password_changed_at_ns": at,
    }
    plan.change("users", payload.user_id, created(row))


def _user_updated(plan: Plan, payload: events_pb2.UserUpdated, at: int) -> None:
    """The fields the event holds (a rename to a taken name is never appended)."""
    changes = {
        name: getattr(payload, name)
        for name in ("username", "display_name", "admin", "active")
        if payload.HasField(name)
    }
    plan.change("users", payload.user_id, updated(**changes))


def _user_password_changed(plan: Plan, payload: events_pb2.UserPasswordChanged, at: int) -> None:
    plan.change("users", payload.user_id, updated(password_changed_at_ns=at))


def _user_session_started(plan: Plan, payload: events_pb2.UserSessionStarted, at: int) -> None:
    row = {
        "session_id": payload.session_id,
        "user_id": payload.user_id,
        "started_at_ns": at,
        "expires_at_ns": payload.expires_at_ns,
        "ended_at_ns": None,
    }
    plan.change("user_sessions", payload.session_id, created(row))


def _user_session_revoked(plan: Plan, payload: events_pb2.UserSessionRevoked, at: int) -> None:
    plan.change("user_sessions", payload.session_id, first(ended_at_ns=at))


def _agent_registered(plan: Plan, envelope: Envelope) -> None:
    """A (new) run of the agent: what it offers, and no longer lost; whether an
    operator disabled it stays as it was. Its event id names the registration
    (AgentLost says which one it found lost)."""
    payload = envelope.agent_registered
    row = {
        "agent_id": payload.agent_id,
        "hostname": payload.hostname,
        "slots": json.dumps([_slot(s) for s in payload.slots]),
        "registered_at_ns": envelope.occurred_at_ns,
        "resource_pool": payload.resource_pool,
        "address": payload.address,
        "state": "ENABLED",
        "registration_event_id": envelope.event_id,
        "lost": False,
    }
    plan.change("agents", payload.agent_id, replaced(row, kept=("state",)))


def _agent_lost(plan: Plan, payload: events_pb2.AgentLost, at: int) -> None:
    plan.change("agents", payload.agent_id, ("lose_agent", (payload.registration_event_id,)))


def _agent_disabled(plan: Plan, payload: events_pb2.AgentDisabled, at: int) -> None:
    plan.change("agents", payload.agent_id, updated(state="DRAINING" if payload.drain else "DISABLED"))


def _agent_enabled(plan: Plan, payload: events_pb2.AgentEnabled, at: int) -> None:
    plan.change("agents", payload.agent_id, updated(state="ENABLED"))


def _job_resources_changed(plan: Plan, payload: events_pb2.JobResourcesChanged, at: int) -> None:
    """An experiment's job: its stored config shows the new priority, weight or
    max_slots (max_slots 0, no cap, shows as null, as an unset one does)."""
    kind, _, key = payload.job_id.partition("/")
    if kind != "experiment" or not key.isdigit():
        return
    changes: dict[str, Any] = {}
    if payload.HasField("priority"):
        changes["priority"] = payload.priority
    if payload.HasField("weight"):
        changes["weight"] = payload.weight
    if payload.HasField("max_slots"):
        changes["max_slots"] = payload.max_slots or None
    if changes:
        plan.change("experiments", int(key), ("set_resources", (changes,)))


def _trial_created(plan: Plan, payload: events_pb2.TrialCreated, at: int) -> None:
    plan.change("trials", payload.trial_id, created(trial_row(payload, at)))


def _trial_ended(plan: Plan, payload: events_pb2.TrialEnded, at: int) -> None:
    state = state_name(events_pb2.TrialState.Name(payload.state))
    plan.change("trials", payload.trial_id, ("end_trial", (state, payload.reason, at)))


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
    plan.change("trials", trial_id, ("set_current_run", (payload.allocation_id, run_id, resumed_at)))
    plan.superseded.append((trial_id, run_id, resumed_at))
    for key in plan.trial_points.get(trial_id, ()):
        if key[3] < run_id and key[2] > resumed_at:
            plan.metric_rows[key] = (*plan.metric_rows[key][:_SUPERSEDED], True)
    if trial_id in plan.total_batches:
        plan.total_batches[trial_id] = min(plan.total_batches[trial_id], resumed_at)


def _allocation_assigned(plan: Plan, payload: events_pb2.AllocationAssigned, at: int) -> None:
    placements = json.dumps([_placement(p) for p in payload.placements])
    plan.change("allocations", payload.allocation_id, updated(placements=placements))
    plan.change("allocations", payload.allocation_id, first(assigned_at_ns=at))


def _allocation_started(plan: Plan, payload: events_pb2.AllocationStarted, at: int) -> None:
    plan.change("allocations", payload.allocation_id, first(started_at_ns=at))


def _allocation_stop_requested(plan: Plan, payload: events_pb2.AllocationStopRequested, at: int) -> None:
    plan.change("allocations", payload.allocation_id, updated(stop_requested=True))
    plan.change("allocations", payload.allocation_id, first(stop_reason=payload.reason))


def _allocation_stop_acknowledged(
    plan: Plan, payload: events_pb2.AllocationStopAcknowledged, at: int
) -> None:
    plan.change("allocations", payload.allocation_id, updated(stop_acknowledged=True))


def _allocation_canceled(plan: Plan, payload: events_pb2.AllocationCanceled, at: int) -> None:
    plan.change("allocations", payload.allocation_id, updated(canceled=True))


def _allocation_exited(plan: Plan, payload: events_pb2.AllocationExited, at: int) -> None:
    plan.change("allocations", payload.allocation_id, first(exited_at_ns=at))
    exited = updated(
        exit_code=payload.exit_code, killed=payload.killed, error=payload.error, agent_lost=payload.agent_lost
    )
    plan.change("allocations", payload.allocation_id, exited)


# Each event type (its Envelope field) that changes rows, and its rule.
_RULES: dict[str, Callable[[Plan, Any, int], None]] = {
    "trial_metrics_reported": _metrics_reported,
    "trial_validation_reported": _validation_reported,
    "experiment_created": _experiment_created,
    "experiment_state_changed": _experiment_state_changed,
    "experiment_kill_requested": _experiment_kill_requested,
    "experiment_progress_changed": _experiment_progress_changed,
    "checkpoint_reported": _checkpoint_reported,
    "agent_lost": _agent_lost,
    "agent_disabled": _agent_disabled,
    "agent_enabled": _agent_enabled,
    "job_resources_changed": _job_resources_changed,
    "trial_created": _trial_created,
    "trial_ended": _trial_ended,
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
    "allocation_stop_requested": _allocation_stop_requested,
    "allocation_stop_acknowledged": _allocation_stop_acknowledged,
    "allocation_canceled": _allocation_canceled,
    "allocation_exited": _allocation_exited,
    "checkpoint_gc_policy_changed": _checkpoint_gc_policy_changed,
    "experiment_deleted": _experiment_deleted,
    "experiment_delete_failed": _experiment_delete_failed,
    "checkpoint_deletion_requested": _checkpoint_deletion_requested,
    "checkpoint_deleted": _checkpoint_deleted,
    "checkpoint_partially_deleted": _checkpoint_partially_deleted,
    "model_created": _model_created,
    "model_version_registered": _model_version_registered,
    "user_created": _user_created,
    "user_updated": _user_updated,
    "user_password_changed": _user_password_changed,
    "user_session_started": _user_session_started,
    "user_session_revoked": _user_session_revoked,
}


# The rules that read the envelope (its event id), not the payload alone.
_ENVELOPE_RULES: dict[str, Callable[[Plan, Envelope], None]] = {
    "agent_registered": _agent_registered,
    "experiment_delete_requested": _experiment_delete_requested,
}


def watched(envelopes: Iterable[Envelope]) -> set[str]:
    """What the projector wakes once these events are stored (Projector.watching):
    the long polls' aggregates (`polled`) and the web UI's pages (`shown`)."""
    events = list(envelopes)
    return polled(events) | shown(events)


def polled(envelopes: Iterable[Envelope]) -> set[str]:
    """The aggregates whose watched state these events change: an allocation's
    stop request or its end, a trial's searcher length or stop. The projector
    wakes the WatchAllocation calls waiting on them once they are stored."""
    found: set[str] = set()
    for envelope in envelopes:
        field_name = envelope.WhichOneof("payload")
        if field_name in _WATCHED_ALLOCATION_EVENTS:
            found.add(aggregate("allocation", getattr(envelope, field_name).allocation_id))
        elif field_name in _WATCHED_TRIAL_EVENTS:
            found.add(aggregate("trial", getattr(envelope, field_name).trial_id))
    return found


_WATCHED_ALLOCATION_EVENTS = ("allocation_stop_requested", "allocation_canceled", "allocation_exited")
_WATCHED_TRIAL_EVENTS = ("trial_length_set", "trial_stop_requested")

# What the web UI's pages show, as the names a live page waits on (the HTTP
# API's streams): the experiments list, one experiment's page (its row, its
# trials' rows, metrics and checkpoints), one trial's page, the cluster page.
SHOWN_EXPERIMENTS = "shown/experiments"
SHOWN_CLUSTER = "shown/cluster"


def shown_experiment(experiment_id: int) -> str:
    return f"shown/experiment/{experiment_id}"


def shown_trial(trial_id: int) -> str:
    return f"shown/trial/{trial_id}"


def shown(envelopes: Iterable[Envelope]) -> set[str]:
    """The pages these events change: an event naming an experiment or a
    trial changes their pages (an allocation's, its trial's: its id is
    `<trial id>.<run>`); those that change an experiment's row in the list,
    or the agents, slots and job queue, change those pages too."""
    found: set[str] = set()
    for envelope in envelopes:
        field_name = envelope.WhichOneof("payload")
        if field_name is None:
            continue
        payload = getattr(envelope, field_name)
        names_experiment, names_trial, names_allocation, pages = _page_rule(field_name, payload.DESCRIPTOR)
        if field_name == "allocation_requested":
            experiment_id, trial_id = payload.trial.experiment_id, payload.trial.trial_id
        else:
            experiment_id = payload.experiment_id if names_experiment else 0
            trial_id = payload.trial_id if names_trial else 0
            if names_allocation and not trial_id:
                task_id = payload.allocation_id.partition(".")[0]
                trial_id = int(task_id) if task_id.isdigit() else 0
        if experiment_id:
            found.add(shown_experiment(experiment_id))
        if trial_id:
            found.add(shown_trial(trial_id))
        found.update(pages)
    return found


@functools.cache
def _page_rule(field_name: str, descriptor: Any) -> tuple[bool, bool, bool, tuple[str, ...]]:
    """For an event type: whether it names an experiment, a trial, an
    allocation, and the pages it changes whatever it names."""
    fields = descriptor.fields_by_name
    pages: tuple[str, ...] = (SHOWN_EXPERIMENTS,) if field_name in _LISTED_EVENTS else ()
    if field_name in _CLUSTER_EVENTS or field_name.startswith(("agent_", "allocation_")):
        pages += (SHOWN_CLUSTER,)
    return "experiment_id" in fields, "trial_id" in fields, "allocation_id" in fields, pages


# The events that change what the experiments list shows of an experiment (its
# row, its number of trials, its progress, its best metric).
_LISTED_EVENTS = frozenset(
    {
        "experiment_created",
        "experiment_state_changed",
        "experiment_kill_requested",
        "experiment_progress_changed",
        "experiment_delete_requested",
        "experiment_deleted",
        "experiment_delete_failed",
        "trial_created",
        "trial_ended",
        "trial_progress_reported",
        "trial_validation_reported",
    }
)
# Besides agent and allocation events: what changes the job queue.
_CLUSTER_EVENTS = frozenset(
    {
        "experiment_created",
        "experiment_state_changed",
        "experiment_kill_requested",
        "job_resources_changed",
    }
)


def state_name(enum_name: str) -> str:
    """EXPERIMENT_STATE_ACTIVE -> ACTIVE, TRIAL_STATE_COMPLETED -> COMPLETED."""
    for prefix in ("EXPERIMENT_STATE_", "TRIAL_STATE_"):
        if enum_name.startswith(prefix):
            return enum_name[len(prefix) :]
    return enum_name


# -- new rows ------------------------------------------------------------------------


def experiment_row(payload: events_pb2.ExperimentCreated, at: int) -> Row:
    config = _json_object(payload.config_json)
    searcher = config.get("searcher") or {}
    resources = config.get("resources") or {}
    return {
        "id": payload.experiment_id,
        "name": payload.name,
        "owner": payload.owner,
        "state": "ACTIVE" if payload.activate else "PAUSED",
        "started_at_ns": at,
        "ended_at_ns": None,
        "description": str(config.get("description") or ""),
        "labels": json.dumps(list(config.get("labels") or [])),
        "resource_pool": str(resources.get("resource_pool") or ""),
        "searcher_name": str(searcher.get("name") or ""),
        "searcher_metric": str(searcher.get("metric") or ""),
        "smaller_is_better": bool(searcher.get("smaller_is_better", True)),
        "config_json": payload.config_json,
        "context_hash": payload.context_hash,
        "end_reason": "",
        "progress": None,
        "delete_requests": "[]",
        "delete_error": "",
        "best_metric": None,
    }


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
        "canceled": False,
        "exited_at_ns": None,
        "exit_code": None,
        "killed": False,
        "agent_lost": False,
        "error": None,
    }


def checkpoint_row(payload: events_pb2.CheckpointReported, at: int) -> Row:
    return {
        "uuid": payload.uuid,
        "trial_id": payload.trial_id,
        "experiment_id": payload.experiment_id,
        "allocation_id": payload.allocation_id,
        "steps_completed": payload.steps_completed,
        "metadata_json": payload.metadata_json,
        "resources": _resources_json(payload.resources),
        "reported_at_ns": payload.reported_at_ns or at,
        "state": "COMPLETED",
        "deletion_id": 0,
        "delete_error": "",
    }


def _resources_json(resources: Mapping[str, int]) -> str:
    return json.dumps({name: resources[name] for name in sorted(resources)})


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
        earlier is not None and earlier[_SUPERSEDED],
    )
    points = plan.trial_points.get(trial_id)
    if points is None:
        plan.trial_points[trial_id] = points = set()
    points.add(key)
    if steps > plan.total_batches.get(trial_id, 0):
        plan.total_batches[trial_id] = steps
    elif trial_id not in plan.total_batches:
        plan.total_batches[trial_id] = 0


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


# -- statements ------------------------------------------------------------------------

_SQL_TYPES: list[tuple[type, str]] = [
    (JSONB, "jsonb"),
    (BigInteger, "bigint"),
    (Integer, "integer"),
    (Boolean, "boolean"),
    (Double, "double precision"),
    (Text, "text"),
]


def _sql_type(column: Any) -> str:
    return next(name for kind, name in _SQL_TYPES if isinstance(column.type, kind))


def key_column(table: str) -> str:
    [key] = ROW_TABLES[table].primary_key.columns
    return str(key.name)


def load_statement(table: str) -> str:
    """The stored rows of a list of keys ($1)."""
    key = ROW_TABLES[table].c[key_column(table)]
    return f'SELECT * FROM {S}.{table} WHERE "{key.name}" = ANY($1::{_sql_type(key)}[])'


def upsert_statement(table: str) -> str:
    """Writes whole rows given as one array per column (in the table's
    column order; JSONB as text): a new row is inserted, a stored one replaced."""
    columns = list(ROW_TABLES[table].columns)
    names = ", ".join(f'"{c.name}"' for c in columns)
    arrays = ", ".join(
        f"${n}::{'text' if _sql_type(c) == 'jsonb' else _sql_type(c)}[]"
        for n, c in enumerate(columns, start=1)
    )
    selected = ", ".join(f'"{c.name}"::jsonb' if _sql_type(c) == "jsonb" else f'"{c.name}"' for c in columns)
    key = key_column(table)
    updates = ", ".join(f'"{c.name}" = excluded."{c.name}"' for c in columns if c.name != key)
    return (
        f"INSERT INTO {S}.{table} ({names}) SELECT {selected} FROM unnest({arrays}) AS u({names})"
        f' ON CONFLICT ("{key}") DO UPDATE SET {updates}'
    )


def row_columns(table: str, rows: list[Row]) -> list[list[Any]]:
    """`rows` as one list per column, in the table's column order."""
    return [[row[c.name] for row in rows] for c in ROW_TABLES[table].columns]


LOADS = {table: load_statement(table) for table in ROW_TABLES}
UPSERTS = {table: upsert_statement(table) for table in ROW_TABLES}
