"""Which event types each part appends and which subject kinds it reads: the
one table the services check their own appends against (EventStore) and
nats-server's permissions are made from (deploy/local/credentials.py)."""

# The event types each part appends (docs/CONTRACTS.md, "Who appends what"); it may publish
# on the subject kinds of these (SUBJECT_KINDS) and no other. The gateway appends for users
# and for trials, of nearly every kind: it may publish on every events subject.
APPENDS: dict[str, tuple[str, ...]] = {
    "searcher": (
        "trial_created",
        "trial_length_set",
        "trial_stop_requested",
        "trial_ended",
        "trial_reopened",
        "experiment_progress_changed",
        "experiment_state_changed",
        "allocation_requested",
        "allocation_stop_requested",
        "allocation_stop_withdrawn",
        "allocation_kill_requested",
    ),
    "scheduler": (
        "allocation_assigned",
        "allocation_canceled",
        "allocation_stop_requested",
        "allocation_kill_requested",
        "allocation_exited",
        "agent_lost",
    ),
    "checkpoint": (
        "checkpoint_deletion_requested",
        "checkpoint_deleted",
        "checkpoint_partially_deleted",
        "tensorboard_files_deleted",
        "experiment_deleted",
        "experiment_delete_failed",
    ),
    "agent": (
        "agent_registered",
        "allocation_started",
        "allocation_ready",
        "allocation_kill_requested",
        "allocation_exited",
        "allocation_resources_exited",
    ),
}

# The subject kinds each part reads: those of the events its cores fold (kinds_of of
# AGENT_FOLDS, SCHEDULER_FOLDS, SEARCHER_FOLDS + LIFECYCLE_FOLDS + UNMANAGED_FOLDS, GC_FOLDS; checked by
# tests/unit/test_credentials.py), which include those it appends to (an append that
# was cut short looks at its aggregate's newest event). No part but the gateway reads
# `user` events.
READS: dict[str, tuple[str, ...]] = {
    "scheduler": ("agent", "allocation", "experiment"),
    "searcher": ("allocation", "checkpoint", "experiment", "trial", "validation"),
    "checkpoint": ("checkpoint", "experiment", "model", "validation"),
    "agent": ("agent", "allocation"),
}
