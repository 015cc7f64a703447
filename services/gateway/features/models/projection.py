"""How events change the model registry's rows (pure; see plan.py and
projection.py for the fold)."""

import json

from determined.proto import events_pb2
from services.gateway.features.feature import Feature
from services.gateway.features.models.tables import model_versions, models
from services.gateway.plan import Plan, created


def _model_created(plan: Plan, payload: events_pb2.ModelCreated, at: int) -> None:
    row = {
        "name": payload.name,
        "model_id": payload.model_id,
        "description": payload.description,
        "metadata_json": payload.metadata_json or "{}",
        "labels": json.dumps(list(payload.labels)),
        "owner": payload.owner,
        "created_at_ns": at,
    }
    plan.change("models", payload.name, created(row))


def _model_version_registered(plan: Plan, payload: events_pb2.ModelVersionRegistered, at: int) -> None:
    version_id = model_version_id(payload.model_name, payload.version)
    row = {
        "id": version_id,
        "model_name": payload.model_name,
        "model_id": payload.model_id,
        "version": payload.version,
        "checkpoint_uuid": payload.checkpoint_uuid,
        "experiment_id": payload.experiment_id,
        "trial_id": payload.trial_id,
        "name": payload.name,
        "comment": payload.comment,
        "owner": payload.owner,
        "registered_at_ns": at,
    }
    plan.change("model_versions", version_id, created(row))


def model_version_id(model_name: str, version: int) -> str:
    """How a checkpoint names a model version it is registered as."""
    return f"{model_name}:{version}"


FEATURE = Feature(
    "models",
    row_tables=(models, model_versions),
    rules={"model_created": _model_created, "model_version_registered": _model_version_registered},
)
