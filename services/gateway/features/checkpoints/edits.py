"""A checkpoint's metadata edits (the SDK's Checkpoint.add_metadata / remove_metadata,
Determined's PostCheckpointMetadata) and the trials that use a checkpoint
(core_context.experimental.report_task_using_checkpoint; Checkpoint.get_metrics).

Who may: PostCheckpointMetadata the experiment's owner or an admin; ReportCheckpointUse a
trial process, for its own trial while its allocation is open; GetCheckpointUsers any user.

Message ids: `checkpoint-metadata-<uuid>-<version>-<hash>` (version: the checkpoint's last
event, so that setting A, B, then A again is stored three times while a retry is stored
once), `checkpoint-used-<trial>-<uuid>` (one per trial and checkpoint).
"""

import hashlib

from determined.common import states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.gateway.auth import require_trial, require_user
from services.gateway.errors import FailedPreconditionError
from services.gateway.features.checkpoints.commands import check_owner_or_admin
from services.gateway.features.checkpoints.service import Checkpoints
from services.gateway.features.parts import FeatureService, Parts
from services.gateway.features.trials.commands import compact_metadata
from services.gateway.features.trials.reports import Reports


def checkpoint_metadata_set(
    checkpoint: api_pb2.Checkpoint, metadata_json: str, *, version: int
) -> Append | None:
    """The checkpoint's new metadata (a JSON object, stored compact and whole), or None when
    it is what is stored already. Refused for a deleted checkpoint."""
    if checkpoint.state not in states.CHECKPOINT_DELETABLE_STATES:
        raise FailedPreconditionError(
            f"checkpoint {checkpoint.uuid} is {checkpoint.state}: its metadata is final"
        )
    compact = compact_metadata(metadata_json)
    if compact == checkpoint.metadata_json:
        return None
    payload = events_pb2.CheckpointMetadataSet(
        uuid=checkpoint.uuid,
        experiment_id=checkpoint.experiment_id,
        trial_id=checkpoint.trial_id,
        metadata_json=compact,
    )
    digest = hashlib.sha256(compact.encode()).hexdigest()[:32]
    msg_id = f"checkpoint-metadata-{checkpoint.uuid}-{version}-{digest}"
    return Append(aggregate("checkpoint", checkpoint.uuid), payload, msg_id)


def trial_used_checkpoint(trial_id: int, experiment_id: int, checkpoint_uuid: str) -> Append:
    payload = events_pb2.TrialUsedCheckpoint(
        trial_id=trial_id, experiment_id=experiment_id, checkpoint_uuid=checkpoint_uuid
    )
    return Append(aggregate("trial", trial_id), payload, f"checkpoint-used-{trial_id}-{checkpoint_uuid}")


class CheckpointEdits(FeatureService):
    """The RPCs above, over the checkpoints feature's lookups and the trials' fencing."""

    def __init__(self, parts: Parts, checkpoints: Checkpoints, reports: Reports) -> None:
        super().__init__(parts)
        self._checkpoints = checkpoints
        self._open_allocation = reports.open_allocation

    async def post_checkpoint_metadata(
        self, request: api_pb2.PostCheckpointMetadataRequest
    ) -> api_pb2.PostCheckpointMetadataResponse:
        """Replaces the metadata; answers with the checkpoint once the read models hold it."""
        principal = require_user()
        checkpoint = await self._checkpoints.checkpoint(request.uuid)
        experiment = await self._checkpoints.experiment(checkpoint.experiment_id)
        check_owner_or_admin(
            experiment.experiment_id,
            experiment.owner,
            principal.username,
            admin=principal.admin,
            what=f"set the metadata of its checkpoint {checkpoint.uuid}",
        )
        last = await self.store.last_event(aggregate("checkpoint", checkpoint.uuid))
        version = 0 if last is None else last.sequence
        append = checkpoint_metadata_set(checkpoint, request.metadata_json, version=version)
        if append is not None:
            sequence, _ = await self.store.append(append, actor=principal.actor)
            await self.projector.wait_for(sequence)
        return api_pb2.PostCheckpointMetadataResponse(
            checkpoint=await self._checkpoints.checkpoint(checkpoint.uuid)
        )

    async def report_checkpoint_use(
        self, request: api_pb2.ReportCheckpointUseRequest
    ) -> api_pb2.ReportCheckpointUseResponse:
        principal = require_trial(request.trial_id)
        allocation = await self._open_allocation(principal)
        checkpoint = await self._checkpoints.checkpoint(request.checkpoint_uuid)
        append = trial_used_checkpoint(request.trial_id, allocation.experiment_id, checkpoint.uuid)
        await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportCheckpointUseResponse()

    async def get_checkpoint_users(
        self, request: api_pb2.GetCheckpointUsersRequest
    ) -> api_pb2.GetCheckpointUsersResponse:
        checkpoint = await self._checkpoints.checkpoint(request.uuid)
        return api_pb2.GetCheckpointUsersResponse(
            trial_ids=await self.queries.checkpoints.users(checkpoint.uuid)
        )
