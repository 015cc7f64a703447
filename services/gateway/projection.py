"""What the projector does with each event (pure): the dispatch from an
event's type to the row rule of the feature that owns the rows it changes
(features/: each feature registers its rules once, in its FEATURE), the plan
of a batch (plan.py), and the statements that load and write back the rows.
No I/O, no clock: the projector shell loads the rows a batch of events
touches, folds the batch over them (`Plan.rows`), and writes the result back
with one statement per table, in one transaction. So a batch of a thousand
events costs a dozen round trips to PostgreSQL, whatever its mix of events,
instead of one per run of a statement.

Events are folded as today's shapes (`upcast`): an old log's
AllocationAssigned reads as the trial's AllocationRequested and an assignment.

Every rule writes absolute values keyed by the event's natural key
(experiment id, trial id, allocation id, checkpoint uuid, metric point), so
applying an event twice leaves the same rows as applying it once: replaying
the log twice, or a log in which every message is duplicated, gives the same
tables. A creation keeps the row that exists (the first one wins); a change
of a row that does not exist changes nothing. Deletion follows the same rule:
an experiment's deletion requests are kept as the set of their event ids
(their number numbers the next request), so a request applied twice counts once.

State strings have no prefix (ACTIVE, STOPPING_KILLED, COMPLETED, ...).
"""

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import BigInteger, Boolean, Double, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.common.envelope import Envelope
from services.common.upcast import upcast
from services.gateway.features import FEATURES
from services.gateway.features.feature import EnvelopeRule, Rule, Statement
from services.gateway.plan import Plan, Row
from services.gateway.read_models import SCHEMA as S

# The tables a batch loads, folds and writes back, by their name.
ROW_TABLES: dict[str, Table] = {table.name: table for feature in FEATURES for table in feature.row_tables}


def _merged(rules: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One dispatch table from the features' own rules: an event type whose
    rows several features own (an allocation's: a trial's run, a notebook's
    task) has their rules applied in the features' order. An event type has
    rules of one kind (payload or envelope) in every feature."""
    found: dict[str, list[Any]] = {}
    for own in rules:
        for event, rule in own.items():
            found.setdefault(event, []).append(rule)
    return {event: each[0] if len(each) == 1 else _each(each) for event, each in found.items()}


def _each(rules: list[Any]) -> Any:
    """One rule that applies `rules` in order."""

    def apply(plan: Plan, *event: Any) -> None:
        for rule in rules:
            rule(plan, *event)

    return apply


# Each event type (its Envelope field) that changes rows, and its rule.
_RULES: dict[str, Rule] = _merged(feature.rules for feature in FEATURES)
# The rules that read the envelope (its event id), not the payload alone.
_ENVELOPE_RULES: dict[str, EnvelopeRule] = _merged(feature.envelope_rules for feature in FEATURES)
if _RULES.keys() & _ENVELOPE_RULES.keys():
    raise ValueError(f"events with rules of both kinds: {sorted(_RULES.keys() & _ENVELOPE_RULES.keys())}")


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


def apply_event(plan: Plan, envelope: Envelope) -> None:
    """Adds what one event does to the plan; an event type this code does
    not know (or one that changes no row: kill requests) adds nothing."""
    field_name = envelope.WhichOneof("payload")
    rule = _RULES.get(field_name or "")
    if rule is not None:
        rule(plan, getattr(envelope, field_name or ""), envelope.occurred_at_ns)
    elif (envelope_rule := _ENVELOPE_RULES.get(field_name or "")) is not None:
        envelope_rule(plan, envelope)


def statements(plan: Plan) -> list[Statement]:
    """The statements the plan needs after its rows are written (the
    features' own: metric points), in the features' order."""
    return [
        statement
        for feature in FEATURES
        if feature.statements is not None
        for statement in feature.statements(plan)
    ]


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
