"""The checkpoints' functions: listings, GC preview and policy, deletion of
checkpoints and experiments, and downloads through the gateway. Thin
functions over the pure rules (commands.py) and the read models
(queries.py); the gRPC servicer and the HTTP routes call them.

Who may call what: reads (GetCheckpoint, the listings, PreviewGc,
DownloadCheckpointFile) any user; what destroys an experiment's data
(DeleteCheckpoints, SetGcPolicy, DeleteExperiment) its owner or an admin, and
DeleteCheckpoints also a trial process, for its own trial's checkpoints while
its allocation is open (core_context.checkpoint.delete).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import structlog

from determined.common import storage
from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.gateway.auth import TrialPrincipal, UserPrincipal, current_principal, require_user
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from services.gateway.features.checkpoints import commands as rules
from services.gateway.features.checkpoints.queries import ExperimentFacts
from services.gateway.features.commands import Unchanged
from services.gateway.features.parts import FeatureService, Parts
from services.gateway.features.trials.reports import Reports

# The size of each DownloadCheckpointFile response's data.
DOWNLOAD_CHUNK_BYTES = 1 << 20

log = structlog.get_logger()


class Checkpoints(FeatureService):
    def __init__(self, parts: Parts, reports: Reports) -> None:
        super().__init__(parts)
        # The reports' fencing: a trial process's allocation, which must be open.
        self._open_allocation = reports.open_allocation

    async def get_checkpoint(self, request: api_pb2.GetCheckpointRequest) -> api_pb2.GetCheckpointResponse:
        return api_pb2.GetCheckpointResponse(checkpoint=await self.checkpoint(request.uuid))

    async def get_experiment_checkpoints(
        self, request: api_pb2.GetExperimentCheckpointsRequest
    ) -> api_pb2.GetCheckpointsResponse:
        listing = rules.checked_listing(
            request.sort_by, request.order_by, request.max_results, request.include_deleted
        )
        experiment = await self.experiment(request.experiment_id)
        found = await self.queries.checkpoints.of_experiment(experiment.experiment_id)
        return api_pb2.GetCheckpointsResponse(checkpoints=_listed(found, listing, experiment))

    async def get_trial_checkpoints(
        self, request: api_pb2.GetTrialCheckpointsRequest
    ) -> api_pb2.GetCheckpointsResponse:
        listing = rules.checked_listing(
            request.sort_by, request.order_by, request.max_results, request.include_deleted
        )
        trial = await self._after_catch_up(self.queries.trials.trial_status, request.trial_id)
        if trial is None:
            raise NotFoundError(f"trial {request.trial_id} not found")
        experiment = await self.experiment(trial.experiment_id)
        found = await self.queries.checkpoints.of_trial(request.trial_id)
        return api_pb2.GetCheckpointsResponse(checkpoints=_listed(found, listing, experiment))

    async def delete_checkpoints(
        self, request: api_pb2.DeleteCheckpointsRequest
    ) -> api_pb2.DeleteCheckpointsResponse:
        """Records the request (CheckpointDeleteAsked, per experiment); the
        checkpoint service deletes the files. Refused whole when a uuid is
        unknown, a model version, not the caller's to delete (a user's: of an
        experiment they do not own, unless an admin; a trial process's: of
        another trial, or its allocation is closed)."""
        principal = current_principal()
        if isinstance(principal, TrialPrincipal):
            await self._open_allocation(principal)
        uuids = list(dict.fromkeys(uuid.strip() for uuid in request.uuids))
        found = await self.queries.checkpoints.checkpoints(uuids)
        if len(found) < len(uuids) and await self.projector.catch_up():
            found = await self.queries.checkpoints.checkpoints(uuids)
        if isinstance(principal, UserPrincipal):
            owners = await self.queries.checkpoints.experiments(
                sorted({c.experiment_id for c in found.values()})
            )
            rules.check_may_delete_checkpoints(
                found.values(),
                {key: facts.owner for key, facts in owners.items()},
                principal.username,
                admin=principal.admin,
            )
        trial_id = principal.trial_id if isinstance(principal, TrialPrincipal) else None
        sources = await self.queries.checkpoints.warm_start_sources(list(found.values()))
        appends = rules.checkpoint_delete_asked(
            uuids, found, request.globs, warm_start_sources=sources, actor=principal.actor, trial_id=trial_id
        )
        for append in appends:
            await self.store.append(append, actor=principal.actor)
        log.info("checkpoint_deletion_asked", uuids=len(uuids), by=principal.actor)
        return api_pb2.DeleteCheckpointsResponse()

    async def preview_gc(self, request: api_pb2.PreviewGcRequest) -> api_pb2.PreviewGcResponse:
        policy = rules.checked_policy(
            request.save_experiment_best, request.save_trial_best, request.save_trial_latest
        )
        experiment = await self.experiment(request.experiment_id)
        deleted = rules.gc_deletes(await self.queries.checkpoints.gc_inputs(experiment), policy)
        return api_pb2.PreviewGcResponse(checkpoints=deleted, bytes=rules.freed_bytes(deleted))

    async def set_gc_policy(self, request: api_pb2.SetGcPolicyRequest) -> api_pb2.SetGcPolicyResponse:
        """Its owner's or an admin's: a policy that keeps fewer deletes checkpoints."""
        user = require_user()
        policy = rules.checked_policy(
            request.save_experiment_best, request.save_trial_best, request.save_trial_latest
        )

        async def decide(version: int) -> Append | Unchanged:
            experiment = await self.experiment(request.experiment_id)
            rules.check_owner_or_admin(
                experiment.experiment_id,
                experiment.owner,
                user.username,
                admin=user.admin,
                what="set its GC policy",
            )
            current = rules.stored_policy(experiment.config_json)
            deletes_now = rules.gc_deletes(await self.queries.checkpoints.gc_inputs(experiment), policy)
            return rules.gc_policy_changed(
                experiment.experiment_id, experiment.state, current, policy, len(deletes_now), version
            )

        unchanged = await self._decide_and_append(aggregate("experiment", request.experiment_id), decide)
        return api_pb2.SetGcPolicyResponse(unchanged_reason=unchanged)

    async def delete_experiment(
        self, request: api_pb2.DeleteExperimentRequest
    ) -> api_pb2.DeleteExperimentResponse:
        user = require_user()

        async def decide(version: int) -> Append | Unchanged:
            experiment = await self.experiment(request.experiment_id)
            rules.check_owner_or_admin(
                experiment.experiment_id, experiment.owner, user.username, admin=user.admin, what="delete it"
            )
            registered = {
                c.uuid: list(c.model_versions)
                for c in await self.queries.checkpoints.of_experiment(experiment.experiment_id)
                if c.model_versions
            }
            return rules.experiment_delete_requested(
                experiment.experiment_id, experiment.state, experiment.delete_requests, registered, version
            )

        await self._decide_and_append(aggregate("experiment", request.experiment_id), decide)
        return api_pb2.DeleteExperimentResponse()

    async def download_checkpoint_file(
        self, request: api_pb2.DownloadCheckpointFileRequest
    ) -> AsyncIterator[api_pb2.DownloadCheckpointFileResponse]:
        """The file's bytes from the offset on, read from the checkpoint's
        storage in a worker thread, DOWNLOAD_CHUNK_BYTES per response. Only
        the checkpoint's recorded files are served."""
        checkpoint = await self.checkpoint(request.uuid)
        size = rules.downloaded_size(checkpoint, request.path, request.offset)
        if request.offset == size:
            yield api_pb2.DownloadCheckpointFileResponse(offset=size, size=size)
            return
        section = rules.storage_section(checkpoint.storage_json)
        chunks = await asyncio.to_thread(_opened, section, checkpoint.uuid, request.path, request.offset)
        offset = request.offset
        try:
            while (
                data := await asyncio.to_thread(_next_chunk, chunks, checkpoint.uuid, request.path)
            ) is not None:
                yield api_pb2.DownloadCheckpointFileResponse(data=data, offset=offset, size=size)
                offset += len(data)
        finally:
            await asyncio.to_thread(_close, chunks)

    async def checkpoint(self, uuid: str) -> api_pb2.Checkpoint:
        if not uuid:
            raise InvalidArgumentError("name the checkpoint by its uuid")
        checkpoint = await self._after_catch_up(self.queries.checkpoints.checkpoint, uuid)
        if checkpoint is None:
            raise NotFoundError(f"checkpoint {uuid} not found")
        return checkpoint

    async def experiment(self, experiment_id: int) -> ExperimentFacts:
        """The experiment, which must exist and not be deleted."""
        experiment = await self._after_catch_up(self.queries.checkpoints.experiment, experiment_id)
        if experiment is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        if experiment.state == "DELETED":
            raise NotFoundError(f"experiment {experiment_id} was deleted")
        return experiment


def _listed(
    checkpoints: list[api_pb2.Checkpoint], listing: rules.Listing, experiment: ExperimentFacts
) -> list[api_pb2.Checkpoint]:
    return rules.listed(
        checkpoints,
        listing,
        searcher_metric=experiment.searcher_metric,
        smaller_is_better=experiment.smaller_is_better,
    )


def _opened(section: dict[str, object], uuid: str, path: str, offset: int) -> Iterator[bytes]:
    """The file's chunks from the checkpoint's storage (blocking: run in a worker thread)."""
    try:
        manager = storage.build(section)
    except (ImportError, ValueError) as error:
        raise FailedPreconditionError(f"the gateway cannot read the checkpoint's storage: {error}") from error
    with _storage_errors(uuid, path):
        return manager.read(uuid, path, offset, DOWNLOAD_CHUNK_BYTES)


def _next_chunk(chunks: Iterator[bytes], uuid: str, path: str) -> bytes | None:
    with _storage_errors(uuid, path):
        return next(chunks, None)


@contextlib.contextmanager
def _storage_errors(uuid: str, path: str) -> Iterator[None]:
    """A file that is not there is NOT_FOUND; a storage that fails, UNAVAILABLE (the
    client's download resumes from what it has)."""
    try:
        yield
    except FileNotFoundError as error:
        raise NotFoundError(f"file {path!r} of checkpoint {uuid} is not in its storage: {error}") from error
    except (
        storage.UnsafeCheckpointFileError
    ) as error:  # a link, a hard link: it may lead outside the checkpoint
        log.warning("checkpoint_file_refused", uuid=uuid, path=path, reason=str(error))
        raise PermissionDeniedError(str(error)) from error
    except (storage.StorageError, OSError) as error:
        raise UnavailableError(f"the storage of checkpoint {uuid} failed: {error}") from error
    except ValueError as error:  # a path the storage refuses to resolve
        raise InvalidArgumentError(f"file {path!r} of checkpoint {uuid}: {error}") from error


def _close(chunks: Iterator[bytes]) -> None:
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
