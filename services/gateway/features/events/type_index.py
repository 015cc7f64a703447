"""The log's index by event type, a read model: the sequence and type of
every event but the per-step reports, so that `det events --type T` reads
the events of T alone instead of every event of T's aggregate kind from the
start (a trial's stop requests are ~1 in 10 of the trial subjects' events,
among its progress reports). The subject names the aggregate, not the type,
so nats-server cannot find them itself.

The per-step reports (HIGH_VOLUME) are left out: they are most of a log
(metric batches alone are half of bench/gen_log.py's), so indexing them
would cost a rebuild more than it gains, and a read of one of them is as
long as its answer anyway. What uses the index is decided here (pure:
`uses_index`); reading it is typed_reading.py.

The projector fills the table as every read model: `rows` gives the rows of
a batch's events (planning.py puts them in the batch's plan, also for an
event the projection could not plan: it is in the log all the same), written
in the batch's transaction, first one wins (a replayed event adds nothing).
"""

from collections.abc import Sequence

from sqlalchemy import BigInteger, Column, Table, Text

from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.gateway.features.feature import Feature, Statement
from services.gateway.plan import Plan
from services.gateway.read_models import SCHEMA as S
from services.gateway.read_models import metadata

# The reports a running trial (or its search) makes every few steps.
HIGH_VOLUME = frozenset(
    {
        "trial_metrics_reported",
        "trial_progress_reported",
        "trial_validation_reported",
        "trial_status_reported",
        "checkpoint_reported",
        "unmanaged_trial_heartbeat",
        "experiment_progress_changed",
    }
)

# The types it holds: every Envelope payload field but the per-step reports.
INDEXED = frozenset(f.name for f in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields) - HIGH_VOLUME

# Keyed by type first: one B-tree serves both the reads (a type's sequences
# in order) and the writes' first-one-wins (an event has one type). A second
# index would cost a rebuild a B-tree insert per row more.
event_types = Table(
    "event_types",
    metadata,
    # The Envelope payload field ("trial_stop_requested").
    Column("event_type", Text, primary_key=True),
    Column("sequence", BigInteger, primary_key=True, autoincrement=False),
)

_INSERT = (
    f"INSERT INTO {S}.event_types (event_type, sequence)"
    " SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT DO NOTHING"
)


def rows(events: Sequence[StoredEvent]) -> list[tuple[int, str]]:
    """(sequence, type) of those of `events` the index holds (none of an
    event that could not be read: its envelope is empty)."""
    return [
        (stored.sequence, kind)
        for stored in events
        if (kind := stored.envelope.WhichOneof("payload")) in INDEXED
    ]


def uses_index(types: frozenset[str], aggregates: list[str] | None) -> bool:
    """Whether a read of these types is answered from the index: it names
    types, all of them indexed, and no aggregate (those are read by their
    own subjects, which is faster still)."""
    return aggregates is None and bool(types) and types <= INDEXED


def statements(plan: Plan) -> list[Statement]:
    if not plan.event_types:
        return []
    sequences, kinds = zip(*plan.event_types, strict=True)
    return [(_INSERT, [(list(kinds), list(sequences))])]


FEATURE = Feature("events", other_tables=(event_types,), statements=statements)
