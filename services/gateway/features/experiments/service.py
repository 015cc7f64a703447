"""The experiments' functions (det experiment create|list|describe|kill|pause|activate,
context uploads), which the gRPC servicer and the HTTP routes call."""

import asyncio
import contextlib
import hashlib
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import cast

import structlog

from determined.common.petname import experiment_name
from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.common.eventlog import ConflictError, StoredEvent
from services.common.eventlog import NotFoundError as StoreNotFoundError
from services.common.scheduling import DEFAULT_POOL
from services.gateway.auth import Principal, current_principal
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ReadModelsUnavailableError,
)
from services.gateway.features.commands import Unchanged
from services.gateway.features.events.as_of import AsOfReads
from services.gateway.features.events.as_of_point import asked
from services.gateway.features.experiments import commands, details
from services.gateway.features.experiments.queries import ExperimentListing
from services.gateway.features.experiments.warm_start import source_trial_checkpoint
from services.gateway.features.parts import FeatureService, Parts

CREATE_ATTEMPTS = 20

log = structlog.get_logger()


class Experiments(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._as_of = AsOfReads(parts)

    async def create(self, request: api_pb2.CreateExperimentRequest) -> api_pb2.CreateExperimentResponse:
        request_id = commands.checked_request_id(request.request_id) or uuid.uuid4().hex
        return await self.create_experiment(request, request_id=request_id, principal=current_principal())

    async def create_experiment(
        self, request: api_pb2.CreateExperimentRequest, *, request_id: str, principal: Principal
    ) -> api_pb2.CreateExperimentResponse:
        """Validates, stores the context (or finds the uploaded one) and
        appends ExperimentCreated under the next free id. The same request id
        appends at most once."""
        if request.context_tgz and request.context_hash:
            raise InvalidArgumentError("send the context as context_tgz or context_hash, not both")
        parent = await self._parent(request.parent_id)
        commands.check_context_size(len(request.context_tgz))
        config = await asyncio.to_thread(  # off the event loop: other calls go on meanwhile
            commands.validate_config,
            request.config_yaml,
            checkpoint_host_path=self.settings.checkpoint_path,
            checkpoint_storage=self.settings.checkpoint_storage,
            experiment_seed=time.time_ns() // 1000 % 2**32,
            name=experiment_name(random.Random()),
            unmanaged=request.unmanaged,
        )
        await self.check_resource_pool(config.config_json)
        warm_start = await source_trial_checkpoint(self.queries, config.config_json)
        response = api_pb2.CreateExperimentResponse(
            warnings=config.warnings + await self.runtime_warnings(config.config_json),
            config_json=config.config_json,
        )
        if request.validate_only:
            return response
        context_hash, context_size = await self._context(request, parent)
        owner = principal.actor.partition(":")[2]

        def created(experiment_id: int) -> Append:
            return commands.experiment_created(
                experiment_id,
                request_id,
                config,
                owner=owner,
                context_hash=context_hash,
                context_size=context_size,
                activate=request.activate,
                parent_id=request.parent_id,
                unmanaged=request.unmanaged,
                source_trial_checkpoint_uuid=warm_start,
            )

        response.experiment_id = await self._append_next_experiment(created, principal.actor)
        log.info("experiment_created", experiment_id=response.experiment_id, request_id=request_id)
        return response

    async def check_resource_pool(self, config_json: str) -> None:
        """Refuses a pool no agent offers. The default pool needs no query, and
        while the read models are down the check is skipped: creating an
        experiment needs no query, and a request for a pool with no agent
        waits, saying why (`det job list`)."""
        if commands.resource_pool_of(config_json) in ("", DEFAULT_POOL):
            return
        try:
            known = await self.queries.agents.resource_pools()
        except ReadModelsUnavailableError:
            log.warning("resource_pool_unchecked", reason="read models unavailable")
            return
        commands.checked_resource_pool(config_json, known)

    async def runtime_warnings(self, config_json: str) -> list[str]:
        """What the config asks that the agents of its pool cannot give, as the
        read models know them (without them: only what no agent here gives)."""
        pool = commands.resource_pool_of(config_json) or DEFAULT_POOL
        try:
            runtimes: set[str] | None = await self.queries.agents.pool_runtimes(pool)
        except ReadModelsUnavailableError:
            runtimes = None
        return commands.runtime_warnings(config_json, pool, runtimes)

    async def _parent(self, parent_id: int) -> api_pb2.Experiment | None:
        """The experiment a fork starts from (None: no fork); NotFoundError
        when there is none or it was deleted."""
        if not parent_id:
            return None
        parent = await self._found(self.queries.experiments.experiment, parent_id, "experiment")
        if parent.state == "DELETED":
            raise NotFoundError(f"experiment {parent_id} was deleted")
        return parent

    async def _context(
        self, request: api_pb2.CreateExperimentRequest, parent: api_pb2.Experiment | None
    ) -> tuple[str, int]:
        """The experiment's context as (hash, size): sent inline (stored
        here), uploaded before (it must be stored), a fork's parent's when it
        brings none, or none ("", 0)."""
        if request.context_tgz:
            return await self.store.contexts.put(request.context_tgz), len(request.context_tgz)
        context_hash = request.context_hash or (parent.context_hash if parent else "")
        if not context_hash:
            return "", 0
        return await self.stored_context(context_hash)

    async def stored_context(self, context_hash: str) -> tuple[str, int]:
        """A context uploaded before (UploadContext) as (hash, size); NotFoundError
        when it is not stored, InvalidArgumentError for a bad hash or size."""
        context_hash = commands.checked_context_hash(context_hash)
        try:
            size = await self.store.contexts.size(context_hash)
        except StoreNotFoundError as error:
            raise NotFoundError(f"{error}; upload it with UploadContext first") from error
        commands.check_context_size(size)
        return context_hash, size

    async def upload_context(
        self, request_iterator: AsyncIterator[api_pb2.UploadContextRequest]
    ) -> api_pb2.UploadContextResponse:
        """Stores a context archive streamed in chunks, by its hash, without
        holding it whole; refused (and nothing kept) past the size limit."""
        context_hash, size = await self.store.contexts.put_chunks(_context_chunks(request_iterator))
        log.info("context_uploaded", context_hash=context_hash, size_bytes=size)
        return api_pb2.UploadContextResponse(context_hash=context_hash, size_bytes=size)

    async def _append_next_experiment(self, created: Callable[[int], Append], actor: str) -> int:
        versions = await self.store.aggregate_versions("experiment")
        experiment_id = max((int(key) for key in versions if key.isdigit()), default=0) + 1
        for _ in range(CREATE_ATTEMPTS):
            append = created(experiment_id)
            try:
                sequence, _ = await self.store.append(append, actor=actor)
            except ConflictError:
                experiment_id += 1  # another gateway took this id first
                continue
            return await self._stored_experiment_id(sequence, append)
        raise FailedPreconditionError("could not find a free experiment id; try again")

    async def _stored_experiment_id(self, sequence: int, append: Append) -> int:
        """The id the event at `sequence` created: a retried request may have
        been stored earlier, under another id (the store deduplicated it)."""
        reading = cast(
            AsyncGenerator[StoredEvent, None], self.store.read(["experiment"], start_sequence=sequence)
        )
        async with contextlib.aclosing(reading) as events:
            async for stored in events:
                if stored.sequence == sequence and stored.envelope.event_id == append.msg_id:
                    return stored.envelope.experiment_created.experiment_id
                break
        return int(append.aggregate.partition("/")[2])

    async def get_experiments(self, request: api_pb2.GetExperimentsRequest) -> api_pb2.GetExperimentsResponse:
        found, total = await self.listed(details.listing_of(request), request.limit, request.offset)
        return api_pb2.GetExperimentsResponse(experiments=found, total=total)

    async def get_experiment(self, request: api_pb2.GetExperimentRequest) -> api_pb2.GetExperimentResponse:
        if asked(request.as_of):
            return await self._as_of.experiment(request)
        experiment = await self._found(
            self.queries.experiments.experiment, request.experiment_id, "experiment"
        )
        if experiment.state == "DELETED":
            raise NotFoundError(f"experiment {request.experiment_id} was deleted")
        trials = await self.queries.trials.trials(request.experiment_id)
        return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials)

    async def get_model_def(self, request: api_pb2.GetModelDefRequest) -> api_pb2.GetModelDefResponse:
        """The context archive the experiment was created with (a fork's: its parent's, unless it brought one)."""
        experiment = await self._found(
            self.queries.experiments.experiment, request.experiment_id, "experiment"
        )
        if experiment.state == "DELETED":
            raise NotFoundError(f"experiment {request.experiment_id} was deleted")
        if not experiment.context_hash:
            raise NotFoundError(f"experiment {request.experiment_id} was created without a model definition")
        try:
            archive = await self.store.contexts.get(experiment.context_hash)
        except StoreNotFoundError as error:
            raise NotFoundError(
                f"the model definition of experiment {request.experiment_id}: {error}"
            ) from error
        return api_pb2.GetModelDefResponse(context_tgz=archive)

    async def get_experiment_trials(
        self, request: api_pb2.GetExperimentTrialsRequest
    ) -> api_pb2.GetExperimentTrialsResponse:
        if asked(request.as_of):
            return await self._as_of.experiment_trials(request)
        await self._experiment_state(request.experiment_id)
        return api_pb2.GetExperimentTrialsResponse(
            trials=await self.queries.trials.trials(request.experiment_id)
        )

    async def kill_experiment(self, request: api_pb2.KillExperimentRequest) -> api_pb2.KillExperimentResponse:
        experiment_id = request.experiment_id

        async def decide(version: int) -> Append | Unchanged:
            state = await self._experiment_state(experiment_id)
            return commands.kill_requested(experiment_id, state, version)

        unchanged = await self._decide_and_append(aggregate("experiment", experiment_id), decide)
        return api_pb2.KillExperimentResponse(unchanged_reason=unchanged)

    async def activate_experiment(
        self, request: api_pb2.ActivateExperimentRequest
    ) -> api_pb2.ActivateExperimentResponse:
        await self._refuse_detached(request.experiment_id, "activate")
        unchanged = await self._change_state(request.experiment_id, commands.activated)
        return api_pb2.ActivateExperimentResponse(unchanged_reason=unchanged)

    async def pause_experiment(
        self, request: api_pb2.PauseExperimentRequest
    ) -> api_pb2.PauseExperimentResponse:
        await self._refuse_detached(request.experiment_id, "pause")
        unchanged = await self._change_state(request.experiment_id, commands.paused)
        return api_pb2.PauseExperimentResponse(unchanged_reason=unchanged)

    async def _refuse_detached(self, experiment_id: int, action: str) -> None:
        """FAILED_PRECONDITION for a detached run (it never changes into a managed one)."""
        found = await self._found(self.queries.experiments.experiment, experiment_id, "experiment")
        commands.check_managed(experiment_id, found.unmanaged, action)

    async def _change_state(
        self, experiment_id: int, decide: Callable[[int, str, int], Append | Unchanged]
    ) -> str:
        """Appends what `decide` makes of the experiment's state, against the
        version that state was read at: a change meanwhile fails the append.
        Returns why nothing changed ("" when the change was appended)."""
        stored = await self.store.last_event(aggregate("experiment", experiment_id))
        if stored is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        await self.projector.wait_for(stored.sequence)  # decide on a state at least this new
        state = await self._experiment_state(experiment_id)
        decision = decide(experiment_id, state, stored.sequence)
        if isinstance(decision, Unchanged):
            return decision.reason
        try:
            await self.store.append(decision, actor=current_principal().actor)
        except ConflictError as error:
            raise FailedPreconditionError(
                f"experiment {experiment_id} changed meanwhile; try again"
            ) from error
        return ""

    async def known(self, experiment_id: int) -> None:
        """NotFoundError unless the read models hold the experiment (a deleted one too)."""
        if await self.queries.experiments.experiment_state(experiment_id) is None:
            raise NotFoundError(f"experiment {experiment_id} not found")

    async def _experiment_state(self, experiment_id: int) -> str:
        """The experiment's state; NOT_FOUND when there is none or it was deleted."""
        state = await self._found(self.queries.experiments.experiment_state, experiment_id, "experiment")
        if state == "DELETED":
            raise NotFoundError(f"experiment {experiment_id} was deleted")
        return state

    async def listed(
        self, listing: ExperimentListing, limit: int, offset: int
    ) -> tuple[list[api_pb2.Experiment], int]:
        """The experiments `listing` selects, `limit` of them (0: all) after the
        first `offset`, and how many it selects in all."""
        found = await self.queries.experiments.experiments(limit, offset, listing)
        return found, await self.queries.experiments.count_experiments(listing)


async def _context_chunks(requests: AsyncIterator[api_pb2.UploadContextRequest]) -> AsyncIterator[bytes]:
    """The chunks of an upload, refused as soon as they pass the size limit,
    and at the end unless the last request names the hash of them all (see
    UploadContextRequest): what raises here leaves nothing stored."""
    received = 0
    sha = hashlib.sha256()
    claimed = ""
    async for request in requests:
        received += len(request.chunk)
        commands.check_context_size(received, complete=False)
        sha.update(request.chunk)
        claimed = request.context_hash
        yield request.chunk
    commands.check_uploaded(claimed, sha.hexdigest())
