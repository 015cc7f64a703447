"""What /metrics learns from the events the projector reads (Projector.observers):
how many of each type, and how long trials take to start.

A trial's run starts in three phases, each ended by an event:
requested (AllocationRequested, the searcher) -> assigned (AllocationAssigned,
the scheduler) -> process started (AllocationStarted, the agent) -> first
report (the run's first metrics, validation or checkpoint, through the
gateway). Each phase's length is the difference of the two events'
`occurred_at_ns` (stamped by their appenders: machines' clocks may differ, so
a negative length counts as 0). A phase is measured only when this gateway
read the event that began it: runs requested before it started are not
measured, and neither is a stretch of the log the projector replays with its
helper process (a start far behind the log). Like any Prometheus counter,
these start again from 0 when the gateway restarts.

The observers run inside the projector after each batch: O(1) per event, no
I/O, and they never raise (an event they cannot make sense of counts as its
type and nothing else).
"""

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent

# The runs whose next phase is awaited, at most (the oldest are forgotten first).
MAX_TRACKED = 100_000
# Each phase: the step that begins it, the step that ends it.
PHASES: dict[str, tuple[str, str]] = {
    "requested_to_assigned": ("requested", "assigned"),
    "assigned_to_started": ("assigned", "started"),
    "started_to_first_report": ("started", "reported"),
}
_PHASE_ENDED_BY = {end: (phase, begin) for phase, (begin, end) in PHASES.items()}
# An event type (its Envelope field) -> its message name, as `det events --type` names it.
TYPE_NAMES: dict[str, str] = {
    field.name: field.message_type.name for field in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields
}
# Records one phase's length in seconds.
Record = Callable[[str, float], None]
V = TypeVar("V")


class EventTypes:
    """How many events of each type the projector has read since the gateway started."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def observe(self, events: Sequence[StoredEvent]) -> None:
        self.counts.update(stored.envelope.WhichOneof("payload") or "unreadable" for stored in events)

    def by_type(self) -> dict[str, int]:
        return {TYPE_NAMES.get(field, field): count for field, count in self.counts.items()}


class StartPhases:
    """Measures trials' start phases as their events are read (see the module's docstring)."""

    def __init__(self, record: Record, limit: int = MAX_TRACKED) -> None:
        self.record = record
        self.limit = limit
        # Allocation id -> the last step it reached before it started (requested,
        # assigned), and when; the runs started and not reported yet, and when.
        # Apart, so that the many reports of running trials cost a look at an
        # empty dict most of the time.
        self.reached: dict[str, tuple[str, int]] = {}
        self.started: dict[str, int] = {}

    def observe(self, events: Sequence[StoredEvent]) -> None:
        for stored in events:
            envelope = stored.envelope
            field = envelope.WhichOneof("payload")
            if field in _REPORTS and not self.started:
                continue
            step = step_of(envelope, field)
            if step is not None:
                self.step(*step, envelope.occurred_at_ns)

    def step(self, allocation_id: str, step: str, at_ns: int) -> None:
        if step in ("requested", "ended"):
            self.reached.pop(allocation_id, None)
            self.started.pop(allocation_id, None)
            if step == "requested":
                _keep(self.reached, allocation_id, (step, at_ns), self.limit)
            return
        phase, begin = _PHASE_ENDED_BY[step]
        if step == "reported":
            began = self.started.pop(allocation_id, None)
        else:
            reached = self.reached.get(allocation_id)
            began = reached[1] if reached is not None and reached[0] == begin else None
        if began is None:  # not measured, or this step seen already
            return
        self.record(phase, max(0, at_ns - began) / 1e9)
        if step == "assigned":
            self.reached[allocation_id] = (step, at_ns)
        elif step == "started":
            del self.reached[allocation_id]
            _keep(self.started, allocation_id, at_ns, self.limit)


def _keep(runs: dict[str, V], allocation_id: str, value: V, limit: int) -> None:
    """Adds a run, forgetting the oldest past `limit`."""
    runs[allocation_id] = value
    if len(runs) > limit:
        del runs[next(iter(runs))]


def step_of(envelope: Envelope, field: str | None) -> tuple[str, str] | None:
    """The trial run an event (its payload in `field`) moves, and the step:
    requested, assigned, started, reported, or ended; None for any other."""
    if field == "allocation_requested":
        requested: events_pb2.AllocationRequested = envelope.allocation_requested
        return (requested.allocation_id, "requested") if requested.task_type == "TRIAL" else None
    if field is not None and field in _ALLOCATION_STEPS:
        return getattr(envelope, field).allocation_id, _ALLOCATION_STEPS[field]
    if field in ("trial_metrics_reported", "trial_validation_reported"):
        report = getattr(envelope, field)
        return f"{report.trial_id}.{report.trial_run_id}", "reported"
    return None


_ALLOCATION_STEPS = {
    "allocation_assigned": "assigned",
    "allocation_started": "started",
    "checkpoint_reported": "reported",
    "allocation_exited": "ended",
    "allocation_canceled": "ended",
}
_REPORTS = frozenset({"trial_metrics_reported", "trial_validation_reported", "checkpoint_reported"})
