"""Code every service shares: the event envelope, the event store client,
the decider shell and the service entry point (`service`), settings and
logging; and what two services share by contract: the words of scheduling
(`scheduling`), the job queue the scheduler publishes for the gateway
(`job_queue`), the GC policy's rule the checkpoint service applies and the
gateway previews (`gc_policy`). Nothing one service alone uses lives here."""
