"""Code every service shares: the event envelope, the event store client,
the decider shell, settings and logging. Nothing service-specific lives here."""
