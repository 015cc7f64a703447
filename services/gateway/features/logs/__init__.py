"""The logs feature: a trial's logs, read from the LOGS stream (no read model)."""
