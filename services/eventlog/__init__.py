"""`python -m services.eventlog`: the event log as JSON lines, for operators."""
