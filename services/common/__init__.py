"""Code every service shares: the event envelope, the event store client,
the decider shell and the service entry point (`service`), settings and
logging. Nothing service-specific lives here."""
