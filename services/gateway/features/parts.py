"""What every feature's functions stand on (the event store, the projector,
the read models' queries, the settings, the users' directory), and the
lookups they share: a read that misses gets one more look once the
projector has caught up with the log (a client reads its own writes), and a
decision made against an aggregate's version is made again when another
writer appended meanwhile."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from services.common.envelope import Append, Envelope, payload_field
from services.common.eventlog import ConflictError
from services.common.eventstore import EventStore
from services.gateway.auth import current_principal
from services.gateway.errors import FailedPreconditionError, NotFoundError
from services.gateway.features.agents.queries import AgentQueries
from services.gateway.features.checkpoints.queries import CheckpointQueries
from services.gateway.features.commands import Unchanged
from services.gateway.features.events.queries import EventScopeQueries
from services.gateway.features.experiments.queries import ExperimentQueries
from services.gateway.features.models.queries import ModelQueries
from services.gateway.features.monitoring.queries import MonitoringQueries
from services.gateway.features.tasks.queries import TaskQueries
from services.gateway.features.trials.queries import TrialQueries
from services.gateway.features.users.directory import UserDirectory
from services.gateway.features.users.queries import UserQueries
from services.gateway.projector import Projector
from services.gateway.read_models import ReadModels
from services.gateway.settings import GatewaySettings

K = TypeVar("K")
T = TypeVar("T")
# How often a decision made against an aggregate's version is made again when
# another writer appended to the aggregate meanwhile.
DECIDE_ATTEMPTS = 5


class Queries:
    """Every feature's queries over one pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.experiments = ExperimentQueries(pool)
        self.trials = TrialQueries(pool)
        self.checkpoints = CheckpointQueries(pool)
        self.models = ModelQueries(pool)
        self.agents = AgentQueries(pool)
        self.users = UserQueries(pool)
        self.tasks = TaskQueries(pool)
        self.monitoring = MonitoringQueries(pool)
        self.events = EventScopeQueries(pool)
        # For /health: whether PostgreSQL answers.
        self.pool = ReadModels(pool)


@dataclass(frozen=True)
class Parts:
    settings: GatewaySettings
    store: EventStore
    projector: Projector
    queries: Queries
    user_directory: UserDirectory


class FeatureService:
    """A feature's functions: the RPCs' and the HTTP routes' one implementation."""

    def __init__(self, parts: Parts) -> None:
        self.settings = parts.settings
        self.store = parts.store
        self.projector = parts.projector
        self.queries = parts.queries
        self.user_directory = parts.user_directory

    async def _after_catch_up(self, lookup: Callable[[K], Awaitable[T | None]], key: K) -> T | None:
        """The lookup's answer; on a miss, once more after the projector has
        caught up with the log (a client reads its own writes)."""
        found = await lookup(key)
        if found is None and await self.projector.catch_up():
            found = await lookup(key)
        return found

    async def _found(self, lookup: Callable[[int], Awaitable[T | None]], key: int, what: str) -> T:
        """The lookup's answer, after a catch-up on a miss; NotFoundError if it is still missing."""
        found = await self._after_catch_up(lookup, key)
        if found is None:
            raise NotFoundError(f"{what} {key} not found")
        return found

    async def _decide_and_append(
        self,
        aggregate_name: str,
        decide: Callable[[int], Awaitable[Append | Unchanged]],
        attempts: int = DECIDE_ATTEMPTS,
    ) -> str:
        """Appends what `decide` makes of the aggregate at its newest version
        (the read models caught up with it), against that version; decides
        again when another writer appended meanwhile (each lost race is another
        writer's win: N racing writers need at most N attempts). Why nothing
        changed, or ""."""
        principal = current_principal()
        for _ in range(attempts):
            stored = await self.store.last_event(aggregate_name)
            if stored is None:
                kind, _, key = aggregate_name.partition("/")
                raise NotFoundError(f"{kind} {key} not found")
            await self.projector.wait_for(stored.sequence)
            decision = await decide(stored.sequence)
            if isinstance(decision, Unchanged):
                return decision.reason
            try:
                sequence, stored_event = await self.store.append(decision, actor=principal.actor)
            except ConflictError:
                continue
            if not appended(decision, stored_event):
                continue
            await self.projector.wait_for(sequence)  # the caller reads what it changed at once
            return ""
        raise FailedPreconditionError(f"{aggregate_name} kept changing meanwhile; try again")


def appended(append: Append, stored: Envelope) -> bool:
    """Whether the event stored under the append's message id is this one: a
    racing request may have taken the id (e.g. the same version number) with
    another payload first, and the store then answers with that event."""
    return bool(getattr(stored, payload_field(append.payload)) == append.payload)
