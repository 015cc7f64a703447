"""The event log as people read it (det events, explain, export): events in
words (wording.py), with every secret redacted (redaction.py), only those of
the aggregates the caller may read (scope.py). It reads the log; its one read
model is the log's index by event type (type_index.py)."""

from services.gateway.features.events.type_index import FEATURE

__all__ = ["FEATURE"]
