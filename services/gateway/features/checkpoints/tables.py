"""The checkpoints' table."""

from sqlalchemy import BigInteger, Column, Index, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("uuid", Text, primary_key=True),
    Column("trial_id", BigInteger, nullable=False),
    Column("experiment_id", BigInteger, nullable=False),
    Column("allocation_id", Text, nullable=False),
    Column("steps_completed", BigInteger, nullable=False),
    Column("metadata_json", Text, nullable=False),
    Column("resources", JSONB, nullable=False),
    Column("reported_at_ns", BigInteger, nullable=False),
    # COMPLETED, DELETING (a CheckpointDeletionRequested named it), DELETED or
    # PARTIALLY_DELETED (resources then lists what is left).
    Column("state", Text, nullable=False),
    # The newest deletion (CheckpointDeletionRequested.deletion_id, per
    # experiment) that named it; 0: none. An outcome of an older one changes nothing.
    Column("deletion_id", BigInteger, nullable=False, server_default="0"),
    # The storage's error when files it was asked to delete are left; "" otherwise.
    Column("delete_error", Text, nullable=False, server_default=""),
    # The trials that reported using it (TrialUsedCheckpoint), a JSON list of ids.
    Column("used_by", JSONB, nullable=False, server_default="[]"),
    Index("checkpoints_by_trial", "trial_id", "steps_completed"),
    Index("checkpoints_by_experiment", "experiment_id"),
)
