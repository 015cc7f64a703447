"""The gRPC servicer: thin handlers over the pure commands, the event store
and the read-model queries. Domain errors are raised, never aborted on: the
interceptor (auth.py) turns them into statuses.

Reads that miss (an experiment created a moment ago) wait for the projector
to catch up with the log once before answering NOT_FOUND, so a client reads
its own writes.

Fencing: a trial process reports only through its trial's current, open
allocation (the one its token names). A process left over from an earlier run
(its allocation exited, was canceled, or a newer run was requested) is
refused with FAILED_PRECONDITION, so nothing it says mixes with the run that
replaced it. Refusals are final and remembered; an accepted report costs one
indexed lookup.
"""

import asyncio
import contextlib
import hashlib
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from importlib import metadata
from typing import TypeAlias, TypeVar, cast

import grpc
import structlog

from determined.common.petname import experiment_name
from determined.proto import api_pb2, api_pb2_grpc
from services.common.envelope import Append, aggregate
from services.common.eventstore import ConflictError, EventStore, StoredEvent
from services.common.eventstore import NotFoundError as StoreNotFoundError
from services.gateway import commands
from services.gateway.auth import (
    Principal,
    TrialPrincipal,
    current_principal,
    require_admin,
    require_allocation,
    require_trial,
)
from services.gateway.checkpoint_queries import CheckpointQueries
from services.gateway.cluster_parts import cluster_parts
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ReadModelsUnavailableError,
)
from services.gateway.jobs import JobQueue
from services.gateway.login_limits import LoginThrottle
from services.gateway.logs import trial_logs
from services.gateway.model_api import ModelRpcs
from services.gateway.projection import ENDED_STATES
from services.gateway.projector import Projector
from services.gateway.queries import AllocationView, MetricKey, Queries, TrialStatus
from services.gateway.settings import GatewaySettings
from services.gateway.user_api import UserRpcs
from services.gateway.user_directory import UserDirectory
from services.scheduler.config import DEFAULT_POOL

CREATE_ATTEMPTS = 20
# The longest a WatchAllocation call waits before answering unchanged.
MAX_WATCH_S = 60.0
# Metric points per GetTrialMetrics response.
METRICS_PAGE = 1000

T = TypeVar("T")
Context: TypeAlias = grpc.aio.ServicerContext

log = structlog.get_logger()


class Servicer(ModelRpcs, UserRpcs, api_pb2_grpc.DeterminedServicer):
    """The API: the handlers here, the checkpoint RPCs (checkpoint_api.py), the
    model registry's (model_api.py) and the users' (user_api.py)."""

    def __init__(
        self,
        settings: GatewaySettings,
        store: EventStore,
        queries: Queries,
        projector: Projector,
        user_directory: UserDirectory,
    ) -> None:
        self.settings = settings
        self.user_directory = user_directory
        self.store = store
        self.queries = queries
        self.checkpoint_queries = CheckpointQueries(queries.pool)
        self.projector = projector
        self.model_ids = asyncio.Lock()
        # Allocation id -> why its reports are refused: final, so kept forever.
        self._refused: dict[str, str] = {}
        self._job_queue = JobQueue(store, settings.scheduler_config())
        self.login_throttle = LoginThrottle(time.monotonic)

    async def close(self) -> None:
        await self._job_queue.close()

    # -- cluster ---------------------------------------------------------------

    async def GetMaster(
        self, request: api_pb2.GetMasterRequest, context: Context
    ) -> api_pb2.GetMasterResponse:
        return api_pb2.GetMasterResponse(
            version=_version(),
            cluster_id=self.settings.cluster_id,
            cluster_name=self.settings.cluster_name,
            parts=cluster_parts(self.settings.status_file),
            nats_url=self.settings.advertised_nats_url or self.settings.nats_url,
            namespace=self.settings.namespace,
        )

    async def GetAgents(
        self, request: api_pb2.GetAgentsRequest, context: Context
    ) -> api_pb2.GetAgentsResponse:
        return api_pb2.GetAgentsResponse(agents=await self.queries.agents())

    async def EnableAgent(
        self, request: api_pb2.EnableAgentRequest, context: Context
    ) -> api_pb2.EnableAgentResponse:
        def decide(state: str, owner: str, version: int) -> Append | commands.Unchanged:
            return commands.agent_enabled(request.agent_id, state, owner, version)

        return api_pb2.EnableAgentResponse(
            unchanged_reason=await self._change_agent(request.agent_id, decide)
        )

    async def DisableAgent(
        self, request: api_pb2.DisableAgentRequest, context: Context
    ) -> api_pb2.DisableAgentResponse:
        def decide(state: str, owner: str, version: int) -> Append | commands.Unchanged:
            return commands.agent_disabled(request.agent_id, state, request.drain, owner, version)

        return api_pb2.DisableAgentResponse(
            unchanged_reason=await self._change_agent(request.agent_id, decide)
        )

    async def _change_agent(
        self, agent_id: str, decide: Callable[[str, str, int], Append | commands.Unchanged]
    ) -> str:
        """Appends what `decide` makes of the agent's state (against the agent's
        version: a change meanwhile fails the append); why nothing changed, else "".
        An admin's only."""
        require_admin("enabling or disabling an agent")
        stored = await self.store.last_event(aggregate("agent", agent_id)) if agent_id else None
        if stored is None:
            raise NotFoundError(f"agent {agent_id!r} not found; det agent list shows the agents")
        await self.projector.wait_for(stored.sequence)
        state = await self.queries.agent_state(agent_id)
        if state is None:
            raise NotFoundError(f"agent {agent_id!r} not found; det agent list shows the agents")
        principal = current_principal()
        decision = decide(state, principal.actor.partition(":")[2], stored.sequence)
        if isinstance(decision, commands.Unchanged):
            return decision.reason
        try:
            sequence, _ = await self.store.append(decision, actor=principal.actor)
        except ConflictError as error:
            raise FailedPreconditionError(f"agent {agent_id} changed meanwhile; try again") from error
        await self.projector.wait_for(sequence)  # det agent list shows it at once
        return ""

    # -- jobs ----------------------------------------------------------------------------

    async def GetJobs(self, request: api_pb2.GetJobsRequest, context: Context) -> api_pb2.GetJobsResponse:
        """The scheduler's queue, pool by pool, with what the read models know
        of each job (name, owner)."""
        config = self._job_queue.config
        views = [
            view
            for view in await self._job_queue.jobs()
            if not request.resource_pool or view.resource_pool == request.resource_pool
        ]
        experiment_ids = [
            commands.checked_job_id(view.job_id) for view in views if _is_experiment_job(view.job_id)
        ]
        experiments = await self.queries.experiment_jobs(experiment_ids)
        if len(experiments) < len(set(experiment_ids)) and await self.projector.catch_up():
            experiments = await self.queries.experiment_jobs(experiment_ids)  # one created a moment ago
        response = api_pb2.GetJobsResponse()
        for view in views:
            job = response.jobs.add(
                job_id=view.job_id,
                type="EXPERIMENT" if _is_experiment_job(view.job_id) else "TASK",
                resource_pool=view.resource_pool,
                priority=view.priority,
                weight=view.weight,
                max_slots=view.max_slots,
                submitted_at_ns=view.submitted_at_ns,
                slots_needed=view.slots_needed,
                slots_acquired=view.slots_acquired,
                state=view.state,
                position=view.position,
                waiting_reason=view.waiting_reason,
            )
            if _is_experiment_job(view.job_id):
                job.experiment_id = commands.checked_job_id(view.job_id)
                known = experiments.get(job.experiment_id)
                if known is not None:
                    job.name, job.owner = known.name, known.owner
        pools = {job.resource_pool for job in response.jobs} | set(await self.queries.resource_pools())
        for pool in sorted(pools):
            if not request.resource_pool or pool == request.resource_pool:
                response.schedulers[pool] = config.pool_types.get(pool, config.default_type)
        return response

    async def UpdateJob(
        self, request: api_pb2.UpdateJobRequest, context: Context
    ) -> api_pb2.UpdateJobResponse:
        """Changes a running or queued experiment's priority, weight or
        max_slots (JobResourcesChanged on its aggregate); NOT_FOUND for an
        unknown or ended one."""
        experiment_id = commands.checked_job_id(request.job_id)
        stored = await self.store.last_event(aggregate("experiment", experiment_id))
        if stored is None:
            raise NotFoundError(f"job experiment/{experiment_id} not found")
        await self.projector.wait_for(stored.sequence)
        experiment = await self._found(self.queries.experiment, experiment_id, "experiment")
        if experiment.state in ENDED_STATES:
            raise NotFoundError(
                f"job experiment/{experiment_id} not found: the experiment is {experiment.state}"
            )
        current = commands.job_resources(experiment.config_json, self._job_queue.config.default_priority)
        principal = current_principal()
        decision = commands.job_resources_changed(
            experiment_id, request, current, principal.actor.partition(":")[2], stored.sequence
        )
        if isinstance(decision, commands.Unchanged):
            return api_pb2.UpdateJobResponse(unchanged_reason=decision.reason)
        try:
            sequence, _ = await self.store.append(decision, actor=principal.actor)
        except ConflictError as error:
            raise FailedPreconditionError(
                f"experiment {experiment_id} changed meanwhile; try again"
            ) from error
        await self.projector.wait_for(sequence)
        return api_pb2.UpdateJobResponse()

    # -- experiments ---------------------------------------------------------------

    async def CreateExperiment(
        self, request: api_pb2.CreateExperimentRequest, context: Context
    ) -> api_pb2.CreateExperimentResponse:
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
        commands.check_context_size(len(request.context_tgz))
        config = await asyncio.to_thread(  # off the event loop: other calls go on meanwhile
            commands.validate_config,
            request.config_yaml,
            checkpoint_host_path=self.settings.checkpoint_path,
            checkpoint_storage=self.settings.checkpoint_storage,
            experiment_seed=time.time_ns() // 1000 % 2**32,
            name=experiment_name(random.Random()),
        )
        await self._check_resource_pool(config.config_json)
        response = api_pb2.CreateExperimentResponse(warnings=config.warnings, config_json=config.config_json)
        if request.validate_only:
            return response
        context_hash, context_size = await self._context(request)
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
            )

        response.experiment_id = await self._append_next_experiment(created, principal.actor)
        log.info("experiment_created", experiment_id=response.experiment_id, request_id=request_id)
        return response

    async def _check_resource_pool(self, config_json: str) -> None:
        """Refuses a pool no agent offers. The default pool needs no query, and
        while the read models are down the check is skipped: creating an
        experiment needs no query, and a request for a pool with no agent
        waits, saying why (`det job list`)."""
        if commands.resource_pool_of(config_json) in ("", DEFAULT_POOL):
            return
        try:
            known = await self.queries.resource_pools()
        except ReadModelsUnavailableError:
            log.warning("resource_pool_unchecked", reason="read models unavailable")
            return
        commands.checked_resource_pool(config_json, known)

    async def _context(self, request: api_pb2.CreateExperimentRequest) -> tuple[str, int]:
        """The experiment's context as (hash, size): sent inline (stored
        here), uploaded before (it must be stored), or none ("", 0)."""
        if request.context_tgz:
            return await self.store.put_context(request.context_tgz), len(request.context_tgz)
        if not request.context_hash:
            return "", 0
        context_hash = commands.checked_context_hash(request.context_hash)
        try:
            size = await self.store.context_size(context_hash)
        except StoreNotFoundError as error:
            raise NotFoundError(f"{error}; upload it with UploadContext first") from error
        commands.check_context_size(size)
        return context_hash, size

    async def UploadContext(
        self, request_iterator: AsyncIterator[api_pb2.UploadContextRequest], context: Context
    ) -> api_pb2.UploadContextResponse:
        """Stores a context archive streamed in chunks, by its hash, without
        holding it whole; refused (and nothing kept) past the size limit."""
        context_hash, size = await self.store.put_context_chunks(_context_chunks(request_iterator))
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

    async def GetExperiments(
        self, request: api_pb2.GetExperimentsRequest, context: Context
    ) -> api_pb2.GetExperimentsResponse:
        experiments = await self.queries.experiments(request.limit, request.offset)
        return api_pb2.GetExperimentsResponse(experiments=experiments)

    async def GetExperiment(
        self, request: api_pb2.GetExperimentRequest, context: Context
    ) -> api_pb2.GetExperimentResponse:
        experiment = await self._found(self.queries.experiment, request.experiment_id, "experiment")
        if experiment.state == "DELETED":
            raise NotFoundError(f"experiment {request.experiment_id} was deleted")
        trials = await self.queries.trials(request.experiment_id)
        return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials)

    async def GetExperimentTrials(
        self, request: api_pb2.GetExperimentTrialsRequest, context: Context
    ) -> api_pb2.GetExperimentTrialsResponse:
        await self._experiment_state(request.experiment_id)
        return api_pb2.GetExperimentTrialsResponse(trials=await self.queries.trials(request.experiment_id))

    async def KillExperiment(
        self, request: api_pb2.KillExperimentRequest, context: Context
    ) -> api_pb2.KillExperimentResponse:
        state = await self._experiment_state(request.experiment_id)
        decision = commands.kill_requested(request.experiment_id, state)
        if isinstance(decision, commands.Unchanged):
            return api_pb2.KillExperimentResponse(unchanged_reason=decision.reason)
        await self.store.append(decision, actor=current_principal().actor)
        return api_pb2.KillExperimentResponse()

    async def ActivateExperiment(
        self, request: api_pb2.ActivateExperimentRequest, context: Context
    ) -> api_pb2.ActivateExperimentResponse:
        unchanged = await self._change_state(request.experiment_id, commands.activated)
        return api_pb2.ActivateExperimentResponse(unchanged_reason=unchanged)

    async def PauseExperiment(
        self, request: api_pb2.PauseExperimentRequest, context: Context
    ) -> api_pb2.PauseExperimentResponse:
        unchanged = await self._change_state(request.experiment_id, commands.paused)
        return api_pb2.PauseExperimentResponse(unchanged_reason=unchanged)

    async def _change_state(
        self, experiment_id: int, decide: Callable[[int, str, int], Append | commands.Unchanged]
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
        if isinstance(decision, commands.Unchanged):
            return decision.reason
        try:
            await self.store.append(decision, actor=current_principal().actor)
        except ConflictError as error:
            raise FailedPreconditionError(
                f"experiment {experiment_id} changed meanwhile; try again"
            ) from error
        return ""

    # -- trials ------------------------------------------------------------------------

    async def GetTrial(self, request: api_pb2.GetTrialRequest, context: Context) -> api_pb2.GetTrialResponse:
        trial = await self._found(self.queries.trial, request.trial_id, "trial")
        return api_pb2.GetTrialResponse(
            trial=trial,
            checkpoints=await self.checkpoint_queries.of_trial(request.trial_id),
            metrics=await self.queries.recent_metrics(request.trial_id),
            runs=await self.queries.runs(request.trial_id),
        )

    async def trial_status(self, trial_id: int) -> TrialStatus:
        """The trial's status; NotFoundError when there is no such trial."""
        return await self._found(self.queries.trial_status, trial_id, "trial")

    async def TrialLogs(
        self, request: api_pb2.TrialLogsRequest, context: Context
    ) -> AsyncIterator[api_pb2.TrialLogsResponse]:
        await self._found(self.queries.trial_status, request.trial_id, "trial")
        rank = request.rank if request.HasField("rank") else None
        async for response in trial_logs(
            self.store, request.trial_id, request.follow, self.queries.trial_status, rank=rank
        ):
            yield response

    async def GetTrialMetrics(
        self, request: api_pb2.GetTrialMetricsRequest, context: Context
    ) -> AsyncIterator[api_pb2.GetTrialMetricsResponse]:
        """Every shown point (superseded ones are not) of the trial's metrics,
        of one group or all, by group then step, METRICS_PAGE points per
        response, each page read on its own (no transaction held open while
        a slow reader drains the stream)."""
        await self._found(self.queries.trial_status, request.trial_id, "trial")
        after: MetricKey | None = None
        while True:
            page = await self.queries.metric_points(request.trial_id, request.group, after, METRICS_PAGE)
            if page:
                yield api_pb2.GetTrialMetricsResponse(points=[point for _, point in page])
            if len(page) < METRICS_PAGE:
                return
            after = page[-1][0]

    async def KillTrial(
        self, request: api_pb2.KillTrialRequest, context: Context
    ) -> api_pb2.KillTrialResponse:
        status = await self._found(self.queries.trial_status, request.trial_id, "trial")
        decision = commands.trial_kill_requested(request.trial_id, status.experiment_id, status.state)
        if isinstance(decision, commands.Unchanged):
            return api_pb2.KillTrialResponse(unchanged_reason=decision.reason)
        await self.store.append(decision, actor=current_principal().actor)
        return api_pb2.KillTrialResponse()

    # -- reports from trial processes ------------------------------------------------------

    async def ReportMetrics(
        self, request: api_pb2.ReportMetricsRequest, context: Context
    ) -> api_pb2.ReportMetricsResponse:
        """Appends the batch's events (a retried batch stores none twice: message ids). A
        batch with an event too large for the event log is refused whole (INVALID_ARGUMENT,
        naming the limit) before any is appended, so that the harness can split it and send
        its parts under ids of their own without storing a report twice."""
        principal, allocation = await self._reporting(request.trial_id)
        appends = commands.metrics_reported(request, allocation.experiment_id)
        commands.check_event_sizes(appends, self.store.nc.max_payload, f"metrics batch {request.batch_seq}")
        for append in appends:
            await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportMetricsResponse()

    async def ReportProgress(
        self, request: api_pb2.ReportProgressRequest, context: Context
    ) -> api_pb2.ReportProgressResponse:
        principal, allocation = await self._reporting(request.trial_id)
        await self.store.append(
            commands.progress_reported(request, allocation.experiment_id), actor=principal.actor
        )
        return api_pb2.ReportProgressResponse()

    async def ReportCheckpoint(
        self, request: api_pb2.ReportCheckpointRequest, context: Context
    ) -> api_pb2.ReportCheckpointResponse:
        principal, allocation = await self._reporting(request.trial_id)
        append = commands.checkpoint_reported(
            request, allocation.experiment_id, reported_at_ns=time.time_ns()
        )
        commands.check_event_sizes(
            [append], self.store.nc.max_payload, f"the report of checkpoint {request.uuid}"
        )
        await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportCheckpointResponse()

    async def ReportStatus(
        self, request: api_pb2.ReportStatusRequest, context: Context
    ) -> api_pb2.ReportStatusResponse:
        principal, allocation = await self._reporting(request.trial_id)
        append = commands.status_reported(request, allocation.experiment_id, allocation.allocation_id)
        await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportStatusResponse()

    async def ReportEarlyExit(
        self, request: api_pb2.ReportEarlyExitRequest, context: Context
    ) -> api_pb2.ReportEarlyExitResponse:
        """Stored once per trial; a later report is refused (FAILED_PRECONDITION,
        "already reported"), decided on the read models caught up with the log
        (two reports racing each other are stored once by the message id)."""
        principal, allocation = await self._reporting(request.trial_id)
        await self.projector.catch_up()
        reported = await self.queries.early_exit_reason(request.trial_id)
        append = commands.early_exit_reported(request, allocation.experiment_id, reported)
        sequence, _ = await self.store.append(append, actor=principal.actor)
        await self.projector.wait_for(sequence)  # a second report is then refused by this gateway
        return api_pb2.ReportEarlyExitResponse()

    async def SetTrialMetadata(
        self, request: api_pb2.SetTrialMetadataRequest, context: Context
    ) -> api_pb2.SetTrialMetadataResponse:
        """Replaces the trial's metadata; answers once the read models hold it,
        so that GetTrialMetadata (from any process of the trial) reads it back."""
        principal, allocation = await self._reporting(request.trial_id)
        last = await self.store.last_event(aggregate("trial", request.trial_id))
        version = 0 if last is None else last.sequence
        await self.projector.wait_for(version)  # compare with what the trial's events say now
        current = await self.queries.trial_metadata(request.trial_id)
        append = commands.metadata_set(request, allocation.experiment_id, version=version, current=current)
        if append is not None:
            sequence, _ = await self.store.append(append, actor=principal.actor)
            await self.projector.wait_for(sequence)
        return api_pb2.SetTrialMetadataResponse()

    async def GetTrialMetadata(
        self, request: api_pb2.GetTrialMetadataRequest, context: Context
    ) -> api_pb2.GetTrialMetadataResponse:
        await self._reporting(request.trial_id)
        metadata_json = await self.queries.trial_metadata(request.trial_id)
        return api_pb2.GetTrialMetadataResponse(metadata_json=metadata_json or "{}")

    async def AcknowledgeStop(
        self, request: api_pb2.AcknowledgeStopRequest, context: Context
    ) -> api_pb2.AcknowledgeStopResponse:
        principal = require_allocation(request.allocation_id)
        allocation = await self._open_allocation(principal)
        if not allocation.stop_requested and await self.projector.catch_up():
            allocation = await self._open_allocation(principal)
        await self.store.append(commands.stop_acknowledged(allocation), actor=principal.actor)
        return api_pb2.AcknowledgeStopResponse()

    async def WatchAllocation(
        self, request: api_pb2.WatchAllocationRequest, context: Context
    ) -> api_pb2.WatchAllocationResponse:
        """Answers at once when the allocation's stop or the trial's searcher
        length differ from what the caller knows, or the searcher is done with
        the trial; else when the projector stores a change of either, or after
        timeout_s (at most MAX_WATCH_S) with the same answer."""
        principal = require_allocation(request.allocation_id)
        deadline = time.monotonic() + min(max(request.timeout_s, 0.0), MAX_WATCH_S)
        watched = [aggregate("allocation", principal.allocation_id), aggregate("trial", principal.trial_id)]
        with self.projector.watching(watched) as changed:
            allocation = await self._open_allocation(principal)
            while True:
                answer = _watch_answer(allocation)
                known = (answer.stop, answer.searcher_length) == (request.stop, request.searcher_length)
                remaining = deadline - time.monotonic()
                if not known or answer.searcher_stopped or remaining <= 0:
                    return answer
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                changed.clear()
                # The row is gone only while the read models are rebuilt: keep the last one seen.
                allocation = await self.queries.allocation(principal.allocation_id) or allocation

    async def GetBestValidation(
        self, request: api_pb2.GetBestValidationRequest, context: Context
    ) -> api_pb2.GetBestValidationResponse:
        _, allocation = await self._reporting(request.trial_id)
        best = await self.queries.best_validation(allocation.experiment_id)
        if best is None:
            return api_pb2.GetBestValidationResponse(found=False)
        return api_pb2.GetBestValidationResponse(found=True, metric=best)

    async def _reporting(self, trial_id: int) -> tuple[TrialPrincipal, AllocationView]:
        """The calling process, which must report for its own trial, and its
        allocation, which must be the trial's current, open one."""
        principal = require_trial(trial_id)
        return principal, await self._open_allocation(principal)

    async def _open_allocation(self, principal: TrialPrincipal) -> AllocationView:
        """The caller's allocation if it is its trial's current, open one, else
        FailedPreconditionError. A missing or closed-looking row gets one more
        look after the projector caught up (the request may be in flight)."""
        allocation_id = principal.allocation_id
        if allocation_id in self._refused:
            raise FailedPreconditionError(self._refused[allocation_id])
        allocation = await self.queries.allocation(allocation_id)
        if (allocation is None or allocation.refusal() is not None) and await self.projector.catch_up():
            allocation = await self.queries.allocation(allocation_id)
        if allocation is None or allocation.trial_id != principal.trial_id:
            raise FailedPreconditionError(
                f"allocation {allocation_id} of trial {principal.trial_id} is unknown; reports from it are refused"
            )
        refusal = allocation.refusal()
        if refusal is not None:
            self._refused[allocation_id] = refusal
            raise FailedPreconditionError(refusal)
        return allocation

    # -- helpers -------------------------------------------------------------------------

    async def _experiment_state(self, experiment_id: int) -> str:
        """The experiment's state; NOT_FOUND when there is none or it was deleted."""
        state = await self._found(self.queries.experiment_state, experiment_id, "experiment")
        if state == "DELETED":
            raise NotFoundError(f"experiment {experiment_id} was deleted")
        return state

    async def _found(self, lookup: Callable[[int], Awaitable[T | None]], key: int, what: str) -> T:
        """The lookup's answer; on a miss, once more after the projector has
        caught up with the log; NotFoundError if it is still missing."""
        found = await lookup(key)
        if found is None and await self.projector.catch_up():
            found = await lookup(key)
        if found is None:
            raise NotFoundError(f"{what} {key} not found")
        return found


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


def _is_experiment_job(job_id: str) -> bool:
    return job_id.startswith("experiment/")


def _watch_answer(allocation: AllocationView) -> api_pb2.WatchAllocationResponse:
    return api_pb2.WatchAllocationResponse(
        stop=allocation.stop_requested,
        reason=allocation.stop_reason or "",
        searcher_length=allocation.searcher_length,
        searcher_stopped=allocation.searcher_stop is not None,
    )


def _version() -> str:
    try:
        return metadata.version("determined-es")
    except metadata.PackageNotFoundError:
        return "0.0.0"
