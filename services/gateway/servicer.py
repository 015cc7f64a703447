"""The gRPC servicer: thin handlers over the pure commands, the event store
and the read-model queries. Domain errors are raised, never aborted on: the
interceptor (auth.py) turns them into statuses.

Reads that miss (an experiment created a moment ago) wait for the projector
to catch up with the log once before answering NOT_FOUND, so a client reads
its own writes.
"""

import contextlib
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
from services.common.envelope import Append
from services.common.eventstore import ConflictError, EventStore, StoredEvent
from services.gateway import commands
from services.gateway.auth import Principal, current_principal, require_trial
from services.gateway.errors import FailedPreconditionError, NotFoundError
from services.gateway.logs import trial_logs
from services.gateway.projector import Projector
from services.gateway.queries import Queries
from services.gateway.settings import GatewaySettings

CREATE_ATTEMPTS = 20

T = TypeVar("T")
Context: TypeAlias = grpc.aio.ServicerContext

log = structlog.get_logger()


class Servicer(api_pb2_grpc.DeterminedServicer):
    def __init__(
        self, settings: GatewaySettings, store: EventStore, queries: Queries, projector: Projector
    ) -> None:
        self.settings = settings
        self.store = store
        self.queries = queries
        self.projector = projector
        # trial id -> experiment id: never changes, so it is cached forever.
        self._experiment_of_trial: dict[int, int] = {}

    # -- cluster ---------------------------------------------------------------

    async def GetMaster(
        self, request: api_pb2.GetMasterRequest, context: Context
    ) -> api_pb2.GetMasterResponse:
        return api_pb2.GetMasterResponse(
            version=_version(), cluster_id=self.settings.cluster_id, cluster_name=self.settings.cluster_name
        )

    async def GetAgents(
        self, request: api_pb2.GetAgentsRequest, context: Context
    ) -> api_pb2.GetAgentsResponse:
        return api_pb2.GetAgentsResponse(agents=await self.queries.agents())

    # -- experiments ---------------------------------------------------------------

    async def CreateExperiment(
        self, request: api_pb2.CreateExperimentRequest, context: Context
    ) -> api_pb2.CreateExperimentResponse:
        request_id = commands.checked_request_id(request.request_id) or uuid.uuid4().hex
        return await self.create_experiment(request, request_id=request_id, principal=current_principal())

    async def create_experiment(
        self, request: api_pb2.CreateExperimentRequest, *, request_id: str, principal: Principal
    ) -> api_pb2.CreateExperimentResponse:
        """Validates, stores the context and appends ExperimentCreated under
        the next free id. The same request id appends at most once."""
        commands.check_context_size(len(request.context_tgz))
        config = commands.validate_config(
            request.config_yaml,
            checkpoint_host_path=self.settings.checkpoint_path,
            experiment_seed=time.time_ns() // 1000 % 2**32,
            name=experiment_name(random.Random()),
        )
        response = api_pb2.CreateExperimentResponse(warnings=config.warnings, config_json=config.config_json)
        if request.validate_only:
            return response
        context_hash = await self.store.put_context(request.context_tgz) if request.context_tgz else ""
        owner = principal.actor.partition(":")[2]

        def created(experiment_id: int) -> Append:
            return commands.experiment_created(
                experiment_id,
                request_id,
                config,
                owner=owner,
                context_hash=context_hash,
                context_size=len(request.context_tgz),
                activate=request.activate,
            )

        response.experiment_id = await self._append_next_experiment(created, principal.actor)
        log.info("experiment_created", experiment_id=response.experiment_id, request_id=request_id)
        return response

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
        trials = await self.queries.trials(request.experiment_id)
        return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials)

    async def GetExperimentTrials(
        self, request: api_pb2.GetExperimentTrialsRequest, context: Context
    ) -> api_pb2.GetExperimentTrialsResponse:
        await self._found(self.queries.experiment_state, request.experiment_id, "experiment")
        return api_pb2.GetExperimentTrialsResponse(trials=await self.queries.trials(request.experiment_id))

    async def KillExperiment(
        self, request: api_pb2.KillExperimentRequest, context: Context
    ) -> api_pb2.KillExperimentResponse:
        state = await self._found(self.queries.experiment_state, request.experiment_id, "experiment")
        append = commands.kill_requested(request.experiment_id, state)
        if append is not None:
            await self.store.append(append, actor=current_principal().actor)
        return api_pb2.KillExperimentResponse()

    async def ActivateExperiment(
        self, request: api_pb2.ActivateExperimentRequest, context: Context
    ) -> api_pb2.ActivateExperimentResponse:
        experiment_id = request.experiment_id
        stored = await self.store.last_event(f"experiment/{experiment_id}")
        if stored is None:
            raise NotFoundError(f"experiment {experiment_id} not found")
        await self.projector.wait_for(stored.sequence)  # decide on a state at least this new
        state = await self._found(self.queries.experiment_state, experiment_id, "experiment")
        append = commands.activated(experiment_id, state, stored.sequence)
        if append is not None:
            try:
                await self.store.append(append, actor=current_principal().actor)
            except ConflictError as error:
                raise FailedPreconditionError(
                    f"experiment {experiment_id} changed meanwhile; try again"
                ) from error
        return api_pb2.ActivateExperimentResponse()

    # -- trials ------------------------------------------------------------------------

    async def GetTrial(self, request: api_pb2.GetTrialRequest, context: Context) -> api_pb2.GetTrialResponse:
        trial = await self._found(self.queries.trial, request.trial_id, "trial")
        return api_pb2.GetTrialResponse(
            trial=trial,
            checkpoints=await self.queries.checkpoints(request.trial_id),
            metrics=await self.queries.recent_metrics(request.trial_id),
        )

    async def TrialLogs(
        self, request: api_pb2.TrialLogsRequest, context: Context
    ) -> AsyncIterator[api_pb2.TrialLogsResponse]:
        await self._found(self.queries.trial_status, request.trial_id, "trial")
        async for response in trial_logs(
            self.store, request.trial_id, request.follow, self.queries.trial_status
        ):
            yield response

    # -- reports from trial processes ------------------------------------------------------

    async def ReportMetrics(
        self, request: api_pb2.ReportMetricsRequest, context: Context
    ) -> api_pb2.ReportMetricsResponse:
        await self._append_report(
            request.trial_id, lambda experiment_id: commands.metrics_reported(request, experiment_id)
        )
        return api_pb2.ReportMetricsResponse()

    async def ReportProgress(
        self, request: api_pb2.ReportProgressRequest, context: Context
    ) -> api_pb2.ReportProgressResponse:
        await self._append_report(
            request.trial_id, lambda experiment_id: commands.progress_reported(request, experiment_id)
        )
        return api_pb2.ReportProgressResponse()

    async def ReportCheckpoint(
        self, request: api_pb2.ReportCheckpointRequest, context: Context
    ) -> api_pb2.ReportCheckpointResponse:
        reported_at_ns = time.time_ns()
        await self._append_report(
            request.trial_id,
            lambda experiment_id: commands.checkpoint_reported(
                request, experiment_id, reported_at_ns=reported_at_ns
            ),
        )
        return api_pb2.ReportCheckpointResponse()

    async def _append_report(self, trial_id: int, report: Callable[[int], Append]) -> None:
        """Appends what the calling trial process reports for its own trial;
        `report` turns the trial's experiment id into the Append."""
        principal = require_trial(trial_id)
        await self.store.append(report(await self._experiment_id(trial_id)), actor=principal.actor)

    async def _experiment_id(self, trial_id: int) -> int:
        if trial_id not in self._experiment_of_trial:
            status = await self._found(self.queries.trial_status, trial_id, "trial")
            self._experiment_of_trial[trial_id] = status.experiment_id
        return self._experiment_of_trial[trial_id]

    # -- helpers -------------------------------------------------------------------------

    async def _found(self, lookup: Callable[[int], Awaitable[T | None]], key: int, what: str) -> T:
        """The lookup's answer; on a miss, once more after the projector has
        caught up with the log; NotFoundError if it is still missing."""
        found = await lookup(key)
        if found is None and await self.projector.catch_up():
            found = await lookup(key)
        if found is None:
            raise NotFoundError(f"{what} {key} not found")
        return found


def _version() -> str:
    try:
        return metadata.version("determined-es")
    except metadata.PackageNotFoundError:
        return "0.0.0"
