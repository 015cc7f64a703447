"""What a feature gives the gateway's shared machinery: its tables, how each
event changes its rows (its row rules, folded by the projector: plan.py,
projection.py), and which events change what the web UI's live pages and
the long polls watch (watched.py). Its queries, commands and feature
functions (service.py) are its own; the gRPC and HTTP edges call them.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table

from determined.proto import events_pb2
from services.gateway.plan import Args, Plan

# What one event does to the plan: (plan, the event's payload, occurred_at_ns).
Rule = Callable[[Plan, Any, int], None]
# A rule that reads the envelope (its event id), not the payload alone.
EnvelopeRule = Callable[[Plan, events_pb2.Envelope], None]
# A statement run after a batch's rows are written, and its argument lists (one run each).
Statement = tuple[str, list[Args]]


@dataclass(frozen=True)
class Feature:
    name: str
    # The tables whose rows the rules fold (loaded and written back whole, by
    # their one key column).
    row_tables: tuple[Table, ...] = ()
    # Its other tables (written by its statements).
    other_tables: tuple[Table, ...] = ()
    # Each event type (its Envelope field) that changes rows, and its rule.
    rules: Mapping[str, Rule] = field(default_factory=dict)
    envelope_rules: Mapping[str, EnvelopeRule] = field(default_factory=dict)
    # The statements a batch's plan needs beyond its rows, in order.
    statements: Callable[[Plan], list[Statement]] | None = None
    # The events that change what the experiments list shows of an experiment.
    listed_events: frozenset[str] = frozenset()
    # Besides agent and allocation events: the events that change the cluster page.
    cluster_events: frozenset[str] = frozenset()
    # The events that wake the long polls waiting on an aggregate, and the
    # kind of that aggregate ("allocation", "trial": its id is in the event).
    polled_events: Mapping[str, str] = field(default_factory=dict)
