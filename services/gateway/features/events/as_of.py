"""The cluster as it was (`--at TIME | --at-seq S` on det experiment describe,
det experiment list-trials, det agent list, det job list): the log folded up
to that point (as_of_point.py), never the live read models.

Each answer folds only the events its question needs, into scratch read
models of its own (as_of_schema.py), then runs the very queries the live
answer runs over them:
- an experiment and its trials: the events of the experiment's own
  aggregates (the experiment, each of its trials with its metrics,
  validations, allocations and checkpoints) from its creation on, read
  through their subjects, or picked from a read of the whole log when that
  stretch is short (LogPart.read); which aggregates they are comes from the
  live read models, which never drop a row, once they hold the point asked for;
- the agents: every agent and allocation event, then the trials of the
  allocations running at that point;
- the job queue: no scratch; it is folded from the agent, allocation and
  experiment events by the gateway's own rules (as_of_jobs.py), the jobs'
  names and owners read as the live answer reads them.

Who may ask: an experiment's as its events (scope.py: its owner, or an
admin); the agents and the queue, any user, as the live calls. Each answer
holds a connection of its own to PostgreSQL, and at most MAX_AT_ONCE run at
once for every gateway of the database (advisory locks of those
connections): another one is refused with RESOURCE_EXHAUSTED.
"""

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import asyncpg

from determined.proto import api_pb2
from services.common.eventlog import StoredEvent
from services.common.job_queue import PublishedQueue
from services.gateway.errors import (
    READ_MODELS_UNAVAILABLE,
    NotFoundError,
    ReadModelsUnavailableError,
    ResourceExhaustedError,
    UnavailableError,
)
from services.gateway.features.events import scope
from services.gateway.features.events.as_of_jobs import JOB_KINDS, JobLog
from services.gateway.features.events.as_of_point import Point, first_event, point_of
from services.gateway.features.events.as_of_schema import ScratchConnection, fold, scratch, scratch_queries
from services.gateway.features.parts import Parts, Queries
from services.gateway.read_models import POSTGRES_DOWN

T = TypeVar("T")

# How many answers as of an earlier point are worked out at once (each folds
# part of the log into PostgreSQL), for all the gateways of one database.
MAX_AT_ONCE = 2
# The advisory locks that count them: (LOCK_CLASS, 0 .. MAX_AT_ONCE - 1).
LOCK_CLASS = 0x61736F66  # "asof"
# How long an answer waits for the live read models to reach its point.
CATCH_UP_S = 10.0
# The kinds of events the agents' answer folds, before their allocations' trials.
AGENT_KINDS = ["agent", "allocation"]
# The longest stretch of the log read whole for the events of some aggregates (LogPart.read).
SCAN_WINDOW = 100_000


@dataclass(frozen=True)
class LogPart:
    """The events an answer folds: those of `kinds` (all when None), or of
    `aggregates`, from `start_sequence` on (an experiment's: from its
    creation, before which none of its aggregates has an event)."""

    kinds: list[str] | None = None
    aggregates: list[str] | None = None
    start_sequence: int = 1

    def read(self, up_to: int) -> tuple[list[str] | None, list[str] | None]:
        """(kinds, aggregates) to read up to sequence `up_to`: the aggregates
        themselves, or every event (to be kept when of one of them) when that
        stretch is at most SCAN_WINDOW events: an experiment's hundreds of
        subjects, read one by one through nats-server's subject index, take
        longer than its stretch of the log read whole (experiment 357 of the
        1M-event bench log mid-log: 4.2 s against 0.9 s at load 8)."""
        if self.aggregates is not None and up_to - self.start_sequence < SCAN_WINDOW:
            return None, None
        return self.kinds, self.aggregates


class AsOfReads:
    """The reads as they were: the experiments', agents' and jobs' features call them."""

    def __init__(self, parts: Parts) -> None:
        self.settings = parts.settings
        self.store = parts.store
        self.projector = parts.projector
        self.queries = parts.queries

    async def experiment(self, request: api_pb2.GetExperimentRequest) -> api_pb2.GetExperimentResponse:
        point, part = await self._experiment_point(request.experiment_id, request.as_of)

        async def described(folded: ScratchConnection) -> api_pb2.GetExperimentResponse:
            queries = scratch_queries(folded)
            experiment = await _experiment(queries, request.experiment_id, point)
            trials = await queries.trials.trials(request.experiment_id)
            return api_pb2.GetExperimentResponse(experiment=experiment, trials=trials, as_of=point.message())

        return await self._answer(point, part, described)

    async def experiment_trials(
        self, request: api_pb2.GetExperimentTrialsRequest
    ) -> api_pb2.GetExperimentTrialsResponse:
        point, part = await self._experiment_point(request.experiment_id, request.as_of)

        async def listed(folded: ScratchConnection) -> api_pb2.GetExperimentTrialsResponse:
            queries = scratch_queries(folded)
            await _experiment(queries, request.experiment_id, point)
            trials = await queries.trials.trials(request.experiment_id)
            return api_pb2.GetExperimentTrialsResponse(trials=trials, as_of=point.message())

        return await self._answer(point, part, listed)

    async def agents(self, request: api_pb2.GetAgentsRequest) -> api_pb2.GetAgentsResponse:
        point = await point_of(self.store, request.as_of)

        async def listed(folded: ScratchConnection) -> api_pb2.GetAgentsResponse:
            # The running allocations' trials are folded after every allocation event: the agents'
            # query reads of a trial only its experiment, which the trial was created with.
            queries = scratch_queries(folded)
            running = {use.trial_id for agent in await queries.agents.agents() for use in agent.slot_uses}
            trials = LogPart(aggregates=[f"trial/{trial_id}" for trial_id in sorted(running - {0})])
            await fold(self.store, folded, self._batches(point, trials), position="as_of_trials")
            return api_pb2.GetAgentsResponse(agents=await queries.agents.agents(), as_of=point.message())

        return await self._answer(point, LogPart(kinds=AGENT_KINDS), listed)

    async def job_queue(
        self, as_of: api_pb2.AsOf, published: PublishedQueue
    ) -> tuple[PublishedQueue, list[str], api_pb2.AsOf]:
        """The queue as it was (with the scheduler's settings `published` now),
        the pools known then, and the point."""
        point = await point_of(self.store, as_of)
        jobs = JobLog()
        async with self._bounded():
            async for batch in self._batches(point, LogPart(kinds=list(JOB_KINDS))):
                for stored in batch:
                    jobs.fold(stored.envelope)
        queue, pools = jobs.queue(published)
        return queue, pools, point.message()

    async def _experiment_point(self, experiment_id: int, as_of: api_pb2.AsOf) -> tuple[Point, LogPart]:
        """The point asked, and the experiment's aggregates (once the live read
        models hold every one of them there is by then) from its first event
        on; PERMISSION_DENIED for a user who may not read its events."""
        await scope.check_may_read(self.queries, "experiment", str(experiment_id))
        point = await point_of(self.store, as_of)
        if not await self.projector.wait_for(point.sequence, CATCH_UP_S):
            raise UnavailableError(
                f"the read models have not reached sequence {point.sequence} yet; try again in a moment"
            )
        aggregates = await scope.aggregates_of_experiment(self.queries, experiment_id)
        created = await first_event(self.store, aggregates=[f"experiment/{experiment_id}"])
        return point, LogPart(aggregates=aggregates, start_sequence=created.sequence if created else 1)

    async def _answer(
        self, point: Point, part: LogPart, question: Callable[[ScratchConnection], Awaitable[T]]
    ) -> T:
        """`question` asked of scratch read models holding `part` of the log up to the point."""
        try:
            async with self._bounded() as connection:
                folded = await scratch(connection)
                await fold(self.store, folded, self._batches(point, part))
                return await question(folded)
        except POSTGRES_DOWN as error:
            raise ReadModelsUnavailableError(READ_MODELS_UNAVAILABLE) from error

    @contextlib.asynccontextmanager
    async def _bounded(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection of its own, holding one of the MAX_AT_ONCE places; its
        scratch goes with it when it closes (at once when the answer failed
        or was cancelled: whatever it was doing is dropped)."""
        try:
            connection = await asyncpg.connect(self.settings.database_url)
        except POSTGRES_DOWN as error:
            raise ReadModelsUnavailableError(READ_MODELS_UNAVAILABLE) from error
        try:
            if not await _took_a_place(connection):
                raise ResourceExhaustedError(
                    f"{MAX_AT_ONCE} answers as of an earlier point of the event log are being worked out"
                    " already (each folds part of the log); try again in a moment"
                )
            yield connection
        except BaseException:
            connection.terminate()
            raise
        await connection.close()

    async def _batches(self, point: Point, part: LogPart) -> AsyncIterator[list[StoredEvent]]:
        """The events of `part` up to the point, in lists."""
        if part.start_sequence > point.sequence or part.aggregates == []:
            return
        kinds, aggregates = part.read(point.sequence)
        kept = set(part.aggregates) if part.aggregates is not None and aggregates is None else None
        reading = cast(
            AsyncGenerator[list[StoredEvent], None],
            self.store.read_batches(
                kinds, start_sequence=part.start_sequence, follow=False, aggregates=aggregates
            ),
        )
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                ended = batch[-1].sequence >= point.sequence
                yield [
                    stored
                    for stored in batch
                    if stored.sequence <= point.sequence
                    and (kept is None or stored.envelope.aggregate in kept)
                ]
                if ended:
                    return


async def _took_a_place(connection: asyncpg.Connection) -> bool:
    """Takes one of the MAX_AT_ONCE places (held until the connection closes)."""
    for place in range(MAX_AT_ONCE):
        if await connection.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, place):
            return True
    return False


async def _experiment(queries: Queries, experiment_id: int, point: Point) -> api_pb2.Experiment:
    """The experiment as the scratch holds it; NOT_FOUND when it did not exist
    then (or was deleted by then), as the live answer's."""
    experiment = await queries.experiments.experiment(experiment_id)
    if experiment is None:
        raise NotFoundError(f"experiment {experiment_id} did not exist yet at sequence {point.sequence}")
    if experiment.state == "DELETED":
        raise NotFoundError(f"experiment {experiment_id} was deleted by sequence {point.sequence}")
    return experiment
