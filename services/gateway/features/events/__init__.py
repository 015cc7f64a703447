"""The event log as people read it (det events, explain, export): events in
words (wording.py), with every secret redacted (redaction.py), only those of
the aggregates the caller may read (scope.py). No read model: it reads the log."""
