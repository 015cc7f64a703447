"""Planning what events do to the read models when some of them are
impossible (pure): the projector and its replay helper leave out an event the
projection raises on, and apply the rest.

Every event a reader gets is well-formed (services/common/wellformed.py), but
well-formed is not sensible: a known type may hold values the projection
cannot take (a hyperparameter document that is no JSON, a number out of
range). Such an event is skipped, not the batch it came in.
"""

from collections.abc import Sequence

import asyncpg

from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.gateway import projection, watched
from services.gateway.features.events import type_index
from services.gateway.plan import Plan

# What planning one event, or writing its rows, may raise because of what
# the event holds (as opposed to PostgreSQL being down, tables.POSTGRES_DOWN).
EVENT_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError,
    asyncpg.IntegrityConstraintViolationError,
    asyncpg.ProgramLimitExceededError,
    ArithmeticError,
    AttributeError,
    LookupError,
    RecursionError,
    TypeError,
    ValueError,
)


def planned_readable(
    events: Sequence[StoredEvent], *, index_types: bool = True
) -> tuple[Plan, list[tuple[int, str]]]:
    """The plan of `events` and, for those the projection raises on (while
    planning or finding what they wake), their index and why: the plan is of
    the others, and the index by type (with `index_types`) holds them all
    (type_index.py)."""
    plan, unplannable = _planned([stored.envelope for stored in events])
    if index_types:
        plan.event_types = type_index.rows(events)
    return plan, unplannable


def _planned(envelopes: Sequence[Envelope]) -> tuple[Plan, list[tuple[int, str]]]:
    try:
        watched.watched(envelopes)
        return projection.plan_batch(envelopes), []
    except EVENT_ERRORS:
        pass
    unplannable: list[tuple[int, str]] = []
    for index, envelope in enumerate(envelopes):
        try:
            projection.plan_batch([envelope])
            watched.watched([envelope])
        except EVENT_ERRORS as error:
            unplannable.append((index, f"the projection cannot apply it: {described(error)}"))
    left_out = {index for index, _ in unplannable}
    return projection.plan_batch(e for i, e in enumerate(envelopes) if i not in left_out), unplannable


def described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
