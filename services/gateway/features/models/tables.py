"""The model registry's tables: one row per model (by name), one per version."""

from sqlalchemy import BigInteger, Column, Index, Integer, Table, Text
from sqlalchemy.dialects.postgresql import JSONB

from services.gateway.read_models import metadata

models = Table(
    "models",
    metadata,
    Column("name", Text, primary_key=True),
    Column("model_id", BigInteger, nullable=False),
    Column("description", Text, nullable=False),
    Column("metadata_json", Text, nullable=False),
    Column("labels", JSONB, nullable=False),
    Column("owner", Text, nullable=False),
    Column("created_at_ns", BigInteger, nullable=False),
    Index("models_by_id", "model_id"),
)


model_versions = Table(
    "model_versions",
    metadata,
    # "<model name>:<version>", as a checkpoint lists the versions it is registered as.
    Column("id", Text, primary_key=True),
    Column("model_name", Text, nullable=False),
    Column("model_id", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    Column("checkpoint_uuid", Text, nullable=False),
    Column("experiment_id", BigInteger, nullable=False),
    Column("trial_id", BigInteger, nullable=False),
    Column("name", Text, nullable=False),
    Column("comment", Text, nullable=False),
    Column("owner", Text, nullable=False),
    Column("registered_at_ns", BigInteger, nullable=False),
    Index("model_versions_by_model", "model_name", "version"),
    Index("model_versions_by_checkpoint", "checkpoint_uuid"),
)
