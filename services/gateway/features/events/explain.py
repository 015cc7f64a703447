"""Why-chains (det events explain): the causation tree of the events of a
trial, an experiment or an allocation, from the user's command through each
service's decision to the outcome (pure; the outcome line is
explain_outcome.py's).

Every event names the event it answers (its causation_id; "" for a user's
command or a trial's report). The tree is made of the events read: an
event's parent is the one it answers, and an event whose cause is not among
them (an agent's registration, a slot freed by another trial's allocation)
is a root. Roots and each event's children are in log order.

Events are read in two parts. The focus (the aggregates named: a trial's
trial/, metrics/, validation/, allocation/ and checkpoint/ aggregates) is
shown whole, less what would drown the chain: progress announcements, and
every batch of training metrics but the last of each run (validations stay:
the searcher decides on them). The context (a trial's experiment, an
allocation's trial) shows only the events that lead to the focus (its
ancestors: the experiment's creation, a pause, a kill) and those that answer
the focus directly (the trial's end after its allocation's exit). An event
not shown is passed through: what answers it hangs from the nearest shown
event above it.

An event that could not be read is shown as a root, worded as unreadable
(wording.py), and so is an event whose causes loop back to it (a malformed
log): the chain shows them, and goes on.
"""

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass

from determined.proto import api_pb2
from services.common.eventlog import StoredEvent
from services.gateway.features.events.explain_outcome import outcome
from services.gateway.features.events.wording import logged_event

# Event types that say how far something got, never why: left out of a tree.
PROGRESS_TYPES = frozenset({"experiment_progress_changed", "trial_progress_reported"})
METRICS_TYPE = "trial_metrics_reported"
# How many causes up a walk goes at most (a log whose causes loop is malformed).
MAX_CAUSES_UP = 10_000
# The events an explanation shows at most (an experiment of thousands of
# trials): the first ones depth first, and the outcome says how many were left out.
MAX_EXPLAINED = 5_000


@dataclass(frozen=True)
class Explained:
    """One event of a tree: its depth (0 = a root) and the sequence of the
    event it answers when that was read (0 else)."""

    stored: StoredEvent
    depth: int
    cause_sequence: int = 0


def explanation(
    events: Sequence[StoredEvent], focus: Collection[str], kind: str, key: str
) -> api_pb2.ExplainEventsResponse:
    """The tree of `events` in words and the outcome of the `kind` named `key`."""
    tree = causation_tree(events, focus)
    chain = [
        api_pb2.ExplainedEvent(event=logged_event(node.stored, node.cause_sequence), depth=node.depth)
        for node in tree[:MAX_EXPLAINED]
    ]
    said = outcome(kind, key, events)
    if len(tree) > MAX_EXPLAINED:
        said += f" (the first {MAX_EXPLAINED} of {len(tree)} events shown)"
    return api_pb2.ExplainEventsResponse(chain=chain, outcome=said)


def causation_tree(events: Sequence[StoredEvent], focus: Collection[str]) -> list[Explained]:
    """The tree of `events` (in log order), depth first; `focus` the
    aggregates shown whole (the others are context, see the module's docstring)."""
    read = _Read(events)
    shown_focus = {id(stored) for stored in _shown_of_focus(read.readable, focus)}
    context = [s for s in read.readable if s.envelope.aggregate not in focus and not _is_noise(s)]
    context_ids = {id(stored) for stored in context}
    leads_to_focus = {
        id(cause)
        for stored in read.readable
        if id(stored) in shown_focus
        for cause in read.causes(stored)
        if id(cause) in context_ids
    }
    # A context event answers the focus when the first event above it that
    # could be shown (context, or focus shown) is of the focus.
    candidates = shown_focus | context_ids
    answers = {id(stored) for stored in context if read.nearest(stored, candidates, shown_focus)}
    shown = shown_focus | leads_to_focus | answers
    kept = [stored for stored in events if id(stored) in shown or id(stored) in read.unreadable]
    return list(_depth_first(read, kept, shown))


class _Read:
    """The events read, by id, and their causes."""

    def __init__(self, events: Sequence[StoredEvent]) -> None:
        self.unreadable = {id(s) for s in events if s.skipped or s.envelope.WhichOneof("payload") is None}
        self.readable = [s for s in events if id(s) not in self.unreadable]
        self.by_id: dict[str, StoredEvent] = {}
        for stored in self.readable:
            self.by_id.setdefault(stored.envelope.event_id, stored)

    def cause(self, stored: StoredEvent) -> StoredEvent | None:
        """The event `stored` answers, when it was read (and is not itself)."""
        if id(stored) in self.unreadable or not stored.envelope.causation_id:
            return None
        cause = self.by_id.get(stored.envelope.causation_id)
        return None if cause is stored else cause

    def causes(self, stored: StoredEvent) -> Iterator[StoredEvent]:
        """The events `stored` answers, nearest first, as far as they were read."""
        seen = {id(stored)}
        cause = self.cause(stored)
        while cause is not None and id(cause) not in seen and len(seen) < MAX_CAUSES_UP:
            yield cause
            seen.add(id(cause))
            cause = self.cause(cause)

    def nearest(self, stored: StoredEvent, among: set[int], of: set[int] | None = None) -> StoredEvent | None:
        """The nearest of `stored`'s causes that is `among` (None: none is, or
        it is not also one `of` these when they are given)."""
        nearest = next((cause for cause in self.causes(stored) if id(cause) in among), None)
        return nearest if nearest is None or of is None or id(nearest) in of else None


def _shown_of_focus(readable: list[StoredEvent], focus: Collection[str]) -> list[StoredEvent]:
    """The focus's events a tree shows: all but progress, and of the metric
    batches only the last of each run (the reports it ended with)."""
    last_batches: dict[tuple[int, int], StoredEvent] = {}
    shown = []
    for stored in readable:
        envelope = stored.envelope
        if envelope.aggregate not in focus:
            continue
        if envelope.WhichOneof("payload") == METRICS_TYPE:
            batch = envelope.trial_metrics_reported
            last_batches[(batch.trial_id, batch.trial_run_id)] = stored
        elif not _is_noise(stored):
            shown.append(stored)
    return [*shown, *last_batches.values()]


def _is_noise(stored: StoredEvent) -> bool:
    """Progress and metric batches: never shown as context."""
    kind = stored.envelope.WhichOneof("payload")
    return kind in PROGRESS_TYPES or kind == METRICS_TYPE


def _depth_first(read: _Read, kept: list[StoredEvent], shown: set[int]) -> Iterator[Explained]:
    """The `kept` events (in log order) depth first: roots and children in log order."""
    children: dict[int, list[StoredEvent]] = {}
    roots: list[StoredEvent] = []
    for stored in kept:
        parent = read.nearest(stored, shown)
        if parent is not None and any(cause is stored for cause in read.causes(parent)):
            parent = None  # its causes loop back to it
        (roots if parent is None else children.setdefault(id(parent), [])).append(stored)
    stack = [(root, 0) for root in reversed(roots)]
    while stack:
        stored, depth = stack.pop()
        cause = read.cause(stored)
        yield Explained(stored, depth, cause.sequence if cause is not None else 0)
        stack.extend((child, depth + 1) for child in reversed(children.get(id(stored), [])))
