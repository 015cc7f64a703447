"""The job queue as it was (`det job list --at`), from the log alone (pure).

The live queue is the scheduler's own (features/jobs/queue.py); the gateway
runs none of its code, so the queue as it was is folded here from the
events: the allocations requested and not yet exited or canceled, which of
them hold slots, what each job asked for (the priority, weight and slot cap of
its first open request, as changed since by JobResourcesChanged) and the
pools the agents registered by then offer. Each pool's jobs are in the order
of their first open requests (by priority first in a priority pool), as the
scheduler orders them; its scheduler and the default priority are the
cluster's now (what the scheduler publishes: the log does not record its
settings). What it cannot show: why a job waited (the scheduler's reasons
are not events: `waiting_reason` is left empty) and the fair-share pass's
own order of service; `det events --type allocation_assigned` shows what was
served when.
"""

from dataclasses import dataclass, field, replace

from google.protobuf.message import Message

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.job_queue import JobView, PublishedQueue
from services.common.scheduling import DEFAULT_POOL, DEFAULT_WEIGHT, PRIORITY
from services.common.stops import NO_STOP, Stops
from services.common.upcast import upcast

# The aggregate kinds whose events the queue is folded from.
JOB_KINDS = ("agent", "allocation", "experiment")


@dataclass(frozen=True)
class OpenRequest:
    requested: events_pb2.AllocationRequested
    requested_at_ns: int
    assigned: bool = False
    stops: Stops = NO_STOP
    kill_requested: bool = False

    @property
    def job_id(self) -> str:
        return self.requested.job_id or f"task/{self.requested.task_id}"

    @property
    def pool(self) -> str:
        return self.requested.resource_pool or DEFAULT_POOL

    @property
    def withdrawn(self) -> bool:
        """Asked to stop or die: a waiting one no longer asks for slots."""
        return self.stops.requested or self.kill_requested


@dataclass
class JobLog:
    """What the queue is folded from, event by event (`fold`)."""

    # Allocation id -> its open request, in request order.
    requests: dict[str, OpenRequest] = field(default_factory=dict)
    # Job id -> what JobResourcesChanged set (a field not set: the request's own).
    changes: dict[str, events_pb2.JobResourcesChanged] = field(default_factory=dict)
    # The pools of the agents registered.
    agent_pools: set[str] = field(default_factory=set)

    def fold(self, envelope: Envelope) -> None:
        for event in upcast(envelope):
            self._fold(event)

    def _fold(self, envelope: Envelope) -> None:
        kind = envelope.WhichOneof("payload")
        if kind == "agent_registered":
            self.agent_pools.add(envelope.agent_registered.resource_pool or DEFAULT_POOL)
        elif kind == "job_resources_changed":
            self._job_changed(envelope.job_resources_changed)
        elif kind == "allocation_requested":
            requested = envelope.allocation_requested
            self.requests.setdefault(requested.allocation_id, OpenRequest(requested, envelope.occurred_at_ns))
        elif kind in ("allocation_exited", "allocation_canceled"):
            self.requests.pop(getattr(envelope, kind).allocation_id, None)
        elif kind in ("allocation_assigned", "allocation_kill_requested") or kind in _STOPS:
            event = getattr(envelope, kind)
            if (request := self.requests.get(event.allocation_id)) is not None:
                self.requests[event.allocation_id] = _changed(request, kind, envelope.event_id, event)

    def _job_changed(self, event: events_pb2.JobResourcesChanged) -> None:
        merged = events_pb2.JobResourcesChanged()
        merged.CopyFrom(self.changes.get(event.job_id, merged))
        merged.MergeFrom(event)  # the fields it sets replace the earlier ones
        self.changes[event.job_id] = merged

    def queue(self, published: PublishedQueue) -> tuple[PublishedQueue, list[str]]:
        """The queue as folded, with the scheduler's settings `published` now,
        and the pools known (the agents' and "default"), sorted."""
        jobs = [view for pool in sorted(self._pools()) for view in self._pool_queue(pool, published)]
        queue = replace(published, sequence=0, kinds=JOB_KINDS, jobs=tuple(jobs))
        return queue, sorted(self.agent_pools | {DEFAULT_POOL})

    def _pools(self) -> set[str]:
        return {request.pool for request in self.requests.values()}

    def _pool_queue(self, pool: str, published: PublishedQueue) -> list[JobView]:
        needed: dict[str, int] = {}
        acquired: dict[str, int] = {}
        first: dict[str, OpenRequest] = {}
        for request in self.requests.values():
            if request.pool != pool:
                continue
            first.setdefault(request.job_id, request)
            if request.assigned or not request.withdrawn:
                needed[request.job_id] = needed.get(request.job_id, 0) + request.requested.slots
                if request.assigned:
                    acquired[request.job_id] = acquired.get(request.job_id, 0) + request.requested.slots
        order = {job_id: index for index, job_id in enumerate(first)}
        by_priority = published.scheduler_of(pool) == PRIORITY
        settings = {job_id: self._settings(first[job_id], published.default_priority) for job_id in needed}
        ranked = sorted(needed, key=lambda job: (settings[job][0] if by_priority else 0, order[job]))
        return [
            JobView(
                job_id=job_id,
                resource_pool=pool,
                priority=settings[job_id][0],
                weight=settings[job_id][1],
                max_slots=settings[job_id][2],
                submitted_at_ns=first[job_id].requested_at_ns,
                slots_needed=needed[job_id],
                slots_acquired=acquired.get(job_id, 0),
                state="SCHEDULED" if acquired.get(job_id) else "QUEUED",
                position=position,
                waiting_reason="",
            )
            for position, job_id in enumerate(ranked, start=1)
        ]

    def _settings(self, request: OpenRequest, default_priority: int) -> tuple[int, float, int]:
        """(priority, weight, max_slots): its first open request's, as changed since."""
        asked = request.requested
        priority = asked.priority or default_priority
        weight = asked.weight if asked.weight > 0 else DEFAULT_WEIGHT
        max_slots = asked.max_slots
        changed = self.changes.get(request.job_id)
        if changed is not None:
            priority = (changed.priority or default_priority) if changed.HasField("priority") else priority
            weight = changed.weight if changed.HasField("weight") and changed.weight > 0 else weight
            max_slots = changed.max_slots if changed.HasField("max_slots") else max_slots
        return priority, weight, max_slots


_STOPS = ("allocation_stop_requested", "allocation_stop_withdrawn")


def _changed(request: OpenRequest, kind: str, event_id: str, event: Message) -> OpenRequest:
    if kind == "allocation_assigned":
        return replace(request, assigned=True)
    if kind == "allocation_kill_requested":
        return replace(request, kill_requested=True)
    return replace(request, stops=request.stops.folded(event_id, event))
