"""How events change the checkpoints' rows (pure; see plan.py and
projection.py for the fold).

A checkpoint's deletion outcome applies unless a newer deletion (by its
deletion_id) has named the checkpoint since, so applying the log twice
leaves the same rows.
"""

import json
from collections.abc import Mapping

from determined.proto import events_pb2
from services.gateway.features.checkpoints.tables import checkpoints
from services.gateway.features.feature import Feature
from services.gateway.plan import Plan, Row


def _checkpoint_reported(plan: Plan, payload: events_pb2.CheckpointReported, at: int) -> None:
    plan.change("checkpoints", payload.uuid, (_report_checkpoint, (checkpoint_row(payload, at),)))


def _checkpoint_deletion_requested(
    plan: Plan, payload: events_pb2.CheckpointDeletionRequested, at: int
) -> None:
    for uuid in payload.uuids:
        plan.change("checkpoints", uuid, (_request_checkpoint_deletion, (payload.deletion_id,)))


def _checkpoint_deleted(plan: Plan, payload: events_pb2.CheckpointDeleted, at: int) -> None:
    settled = (payload.deletion_id, "DELETED", "{}", "")
    plan.change("checkpoints", payload.uuid, (_settle_checkpoint_deletion, settled))


def _checkpoint_partially_deleted(
    plan: Plan, payload: events_pb2.CheckpointPartiallyDeleted, at: int
) -> None:
    remaining = _resources_json(payload.remaining)
    settled = (payload.deletion_id, "PARTIALLY_DELETED", remaining, payload.error)
    plan.change("checkpoints", payload.uuid, (_settle_checkpoint_deletion, settled))


def _checkpoint_metadata_set(plan: Plan, payload: events_pb2.CheckpointMetadataSet, at: int) -> None:
    plan.change("checkpoints", payload.uuid, (_set_metadata, (payload.metadata_json,)))


def _trial_used_checkpoint(plan: Plan, payload: events_pb2.TrialUsedCheckpoint, at: int) -> None:
    plan.change("checkpoints", payload.checkpoint_uuid, (_add_user, (payload.trial_id,)))


def _set_metadata(row: Row | None, metadata_json: str) -> Row | None:
    if row is not None:
        row["metadata_json"] = metadata_json
    return row


def _add_user(row: Row | None, trial_id: int) -> Row | None:
    if row is not None:
        users = json.loads(row["used_by"])
        if trial_id not in users:
            row["used_by"] = json.dumps(sorted([*users, trial_id]))
    return row


def _report_checkpoint(row: Row | None, new: Row) -> Row | None:
    """A checkpoint's report: a new row, or the stored one replaced but for
    its state and the trials that use it; once a deletion named it, a
    repeated report changes nothing."""
    if row is None:
        return dict(new)
    if row["deletion_id"]:
        return row
    return {**new, "state": row["state"], "used_by": row["used_by"]}


def _request_checkpoint_deletion(row: Row | None, deletion_id: int) -> Row | None:
    """DELETING, when this deletion is newer than the last that named it (and
    the checkpoint is not gone already)."""
    if row is not None and deletion_id > row["deletion_id"] and row["state"] != "DELETED":
        row["state"] = "DELETING"
        row["deletion_id"] = deletion_id
        row["delete_error"] = ""
    return row


def _settle_checkpoint_deletion(
    row: Row | None, deletion_id: int, state: str, remaining: str, error: str
) -> Row | None:
    """What a deletion left (`remaining`: the resources' JSON), unless a newer
    deletion has named the checkpoint since."""
    if row is not None and deletion_id >= row["deletion_id"]:
        row.update(state=state, resources=remaining, delete_error=error, deletion_id=deletion_id)
    return row


def checkpoint_row(payload: events_pb2.CheckpointReported, at: int) -> Row:
    return {
        "uuid": payload.uuid,
        "trial_id": payload.trial_id,
        "experiment_id": payload.experiment_id,
        "allocation_id": payload.allocation_id,
        "steps_completed": payload.steps_completed,
        "metadata_json": payload.metadata_json,
        "resources": _resources_json(payload.resources),
        "reported_at_ns": payload.reported_at_ns or at,
        "state": "COMPLETED",
        "deletion_id": 0,
        "delete_error": "",
        "used_by": "[]",
    }


def _resources_json(resources: Mapping[str, int]) -> str:
    return json.dumps({name: resources[name] for name in sorted(resources)})


FEATURE = Feature(
    "checkpoints",
    row_tables=(checkpoints,),
    rules={
        "checkpoint_reported": _checkpoint_reported,
        "checkpoint_deletion_requested": _checkpoint_deletion_requested,
        "checkpoint_deleted": _checkpoint_deleted,
        "checkpoint_partially_deleted": _checkpoint_partially_deleted,
        "checkpoint_metadata_set": _checkpoint_metadata_set,
        "trial_used_checkpoint": _trial_used_checkpoint,
    },
)
