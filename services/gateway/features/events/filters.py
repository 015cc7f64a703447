"""An EventFilter checked and made ready to apply (pure): its sizes, the event
types it names (by Envelope field or message name), what it names (an
experiment, trial, allocation, task) and the test each event read must pass."""

from dataclasses import dataclass

from determined.proto import api_pb2
from services.common.envelope import SUBJECT_KINDS, Envelope
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events.scope import Visibility

# Each field name and message name -> the field name ("TrialStopRequested" -> "trial_stop_requested").
EVENT_TYPES: dict[str, str] = {
    name: field.name
    for field in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields
    for name in (field.name, field.message_type.name)
}
# Limits of a filter's inputs, checked before anything is looked up.
MAX_TYPES = 2 * len(SUBJECT_KINDS)
MAX_NAME_CHARS = 128
# How far the log's order may stray from the order of its events' times (a
# writer's clock behind, an append retried through an outage keeping its first
# time): a read from `since` starts at the events of this much earlier, and an
# event this much after `until` ends it.
CLOCK_SLACK_NS = 600 * 10**9


def checked(event_filter: api_pb2.EventFilter) -> None:
    """InvalidArgumentError for a filter whose inputs are out of bounds."""
    if len(event_filter.types) > MAX_TYPES:
        raise InvalidArgumentError(f"at most {MAX_TYPES} event types, not {len(event_filter.types)}")
    named = {
        "allocation_id": event_filter.allocation_id,
        "task_id": event_filter.task_id,
        "user": event_filter.user,
        **{f"type {index + 1}": name for index, name in enumerate(event_filter.types)},
    }
    for what, value in named.items():
        if len(value) > MAX_NAME_CHARS:
            raise InvalidArgumentError(f"{what} is longer than {MAX_NAME_CHARS} characters")
    numbers = {
        "experiment_id": event_filter.experiment_id,
        "trial_id": event_filter.trial_id,
        "since_ns": event_filter.since_ns,
        "until_ns": event_filter.until_ns,
        "from_sequence": event_filter.from_sequence,
    }
    for what, number in numbers.items():
        if number < 0:
            raise InvalidArgumentError(f"{what} must be 0 or more, not {number}")


def event_types(names: list[str]) -> frozenset[str]:
    """The Envelope field names of these types (given by field or message
    name); InvalidArgumentError naming the first that is no event type."""
    unknown = [name for name in names if name not in EVENT_TYPES]
    if unknown:
        raise InvalidArgumentError(
            f"{unknown[0]!r} is no event type; types are Envelope's payload fields"
            " (trial_stop_requested) or their messages (TrialStopRequested)"
        )
    return frozenset(EVENT_TYPES[name] for name in names)


def kinds_of_types(types: frozenset[str]) -> list[str] | None:
    """The aggregate kinds whose subjects hold these types (None: every kind)."""
    return sorted({SUBJECT_KINDS[event_type] for event_type in types}) or None


def named_scopes(event_filter: api_pb2.EventFilter) -> list[tuple[str, str]]:
    """What the filter names, as (kind, id) of scope.SCOPE_KINDS."""
    named = (
        ("experiment", str(event_filter.experiment_id) if event_filter.experiment_id else ""),
        ("trial", str(event_filter.trial_id) if event_filter.trial_id else ""),
        ("allocation", event_filter.allocation_id),
        ("task", event_filter.task_id),
    )
    return [(kind, key) for kind, key in named if key]


@dataclass(frozen=True)
class EventMatch:
    """The test each event read must pass: its type, who appended it, when,
    and (naming nothing, for a user who is not an admin) whether they may see it."""

    types: frozenset[str]
    user: str
    since_ns: int
    until_ns: int
    visibility: Visibility | None

    @classmethod
    def of(cls, event_filter: api_pb2.EventFilter, visibility: Visibility | None) -> "EventMatch":
        types = event_types(list(event_filter.types))
        return cls(types, event_filter.user, event_filter.since_ns, event_filter.until_ns, visibility)

    def keeps(self, envelope: Envelope) -> bool:
        if self.types and envelope.WhichOneof("payload") not in self.types:
            return False
        if self.user and envelope.actor != f"user:{self.user}":
            return False
        if envelope.occurred_at_ns < self.since_ns:
            return False
        if self.until_ns and envelope.occurred_at_ns > self.until_ns:
            return False
        return self.visibility is None or self.visibility.covers(envelope)

    def past_the_end(self, envelope: Envelope) -> bool:
        """Whether no event after this one can be before `until` (see CLOCK_SLACK_NS)."""
        return bool(self.until_ns) and envelope.occurred_at_ns > self.until_ns + CLOCK_SLACK_NS
