"""ExplainEvents (`det events explain trial N | experiment N | allocation ID`):
the causation tree of what is named and its outcome (explain.py), for its
owner or an admin (scope.py).

What is named is read whole through its aggregates' subjects (its focus),
with what led to it (its context): a trial's experiment; an allocation's
trial and experiment, so that the chain reaches back to the user's command.
"""

import contextlib
from collections.abc import AsyncGenerator
from typing import cast

from determined.proto import api_pb2
from services.common.eventlog import StoredEvent
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events import scope
from services.gateway.features.events.explain import explanation
from services.gateway.features.parts import FeatureService

EXPLAIN_KINDS = ("trial", "experiment", "allocation")
# The longest id one may name (an allocation id is "<task id>.<run>", a task id a UUID).
MAX_ID_CHARS = 100


class Explanations(FeatureService):
    async def explain_events(self, request: api_pb2.ExplainEventsRequest) -> api_pb2.ExplainEventsResponse:
        kind, key = request.kind, request.id
        if kind not in EXPLAIN_KINDS:
            raise InvalidArgumentError(f"explain a {' | '.join(EXPLAIN_KINDS)}, not {kind[:MAX_ID_CHARS]!r}")
        if not key or len(key) > MAX_ID_CHARS:
            raise InvalidArgumentError(
                f"name the {kind} to explain by its id (at most {MAX_ID_CHARS} characters)"
            )
        await scope.check_may_read(self.queries, kind, key)
        focus = await scope.aggregates_of(self.queries, kind, key)
        events = await self._read([*focus, *await self._context(kind, key)])
        return explanation(events, set(focus), kind, key)

    async def _context(self, kind: str, key: str) -> list[str]:
        """The aggregates that led to what is named (see the module's docstring)."""
        trial_id = await self.queries.events.allocation_trial(key) if kind == "allocation" else None
        if trial_id is not None:
            return [
                *await scope.aggregates_of_trial(self.queries, trial_id),
                *await self._context("trial", str(trial_id)),
            ]
        experiment_id = await self.queries.events.trial_experiment(int(key)) if kind == "trial" else None
        return [] if experiment_id is None else [f"experiment/{experiment_id}"]

    async def _read(self, aggregates: list[str]) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        reading = cast(
            AsyncGenerator[list[StoredEvent], None],
            self.store.read_batches(None, 1, follow=False, aggregates=sorted(set(aggregates))),
        )
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                events.extend(batch)
        return events
