"""The recorded workload (GetWorkload, `det events simulate`): what the
scheduler was asked for and what it did, folded from the allocation, agent
and job events of the log. Pure: the service (workload_service.py) reads the
events and hands them here; the caller replays the workload through the
scheduler's core (services/scheduler/simulate.py), which the gateway never runs.

One RecordedAllocation per allocation: when it was requested, with which
job settings in force (a JobResourcesChanged folded before the request
counts; a request that gives no priority has the scheduler's default), when
and where it was assigned, how long it ran, when the scheduler's view of it
turned to "asked to stop or die" for good (a pause's stop withdrawn does not
count) and whether that was the scheduler's own preemption, and when it
ended. One RecordedAgent per registration. Each moment carries its stream
sequence: a cascade of decisions can share one time.
"""

from dataclasses import dataclass, field

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Envelope, payload_of
from services.common.eventlog import StoredEvent
from services.common.job_queue import PublishedQueue
from services.common.scheduling import DEFAULT_POOL, DEFAULT_PRIORITY, DEFAULT_WEIGHT
from services.common.stops import NO_STOP, Stops
from services.common.upcast import upcast
from services.gateway.errors import FailedPreconditionError

# The kinds of aggregate whose events the workload folds (JobResourcesChanged
# of an experiment's job is on the experiment, of a task's on its allocation).
WORKLOAD_KINDS = ["agent", "allocation", "experiment"]
# The most allocations one answer holds (some 200 bytes each): a longer window is refused.
MAX_ALLOCATIONS = 400_000
# The message id prefix of the scheduler's preemptions (services/scheduler/core.py).
PREEMPT_ID_PREFIX = "allocation-preempt-"


@dataclass
class _Open:
    """An allocation being folded."""

    recorded: api_pb2.RecordedAllocation
    stops: Stops = NO_STOP
    kill_requested: bool = False


@dataclass(frozen=True)
class _JobOverride:
    priority: int | None = None
    weight: float | None = None
    max_slots: int | None = None


@dataclass
class WorkloadRecorder:
    """Folds stored events (`fold`) into the workload of the window
    [since_ns, until_ns] (0: open) (`response`)."""

    since_ns: int = 0
    until_ns: int = 0
    # The scheduler's priority of a request that gives none (as it published it).
    default_priority: int = DEFAULT_PRIORITY
    allocations: dict[str, _Open] = field(default_factory=dict)
    agents: list[api_pb2.RecordedAgent] = field(default_factory=list)
    # Agent id -> (its current registration's event id, its index in `agents`).
    registrations: dict[str, tuple[str, int]] = field(default_factory=dict)
    jobs: dict[str, _JobOverride] = field(default_factory=dict)
    # The newest event folded: its time and sequence.
    last_ns: int = 0
    last_sequence: int = 0

    def fold(self, stored: StoredEvent) -> None:
        """One stored event; one that cannot be read (skipped) or that names
        nothing known changes nothing."""
        if stored.skipped:
            return
        self.last_ns = max(self.last_ns, stored.envelope.occurred_at_ns)
        self.last_sequence = max(self.last_sequence, stored.sequence)
        for envelope in upcast(stored.envelope):
            self._fold(envelope, (envelope.occurred_at_ns, stored.sequence))

    def _fold(self, envelope: Envelope, at: tuple[int, int]) -> None:
        event = payload_of(envelope)
        match event:
            case events_pb2.AgentRegistered():
                self._registered(event, envelope.event_id, at)
            case events_pb2.AgentLost():
                self._lost(event, at)
            case events_pb2.JobResourcesChanged():
                self._job_changed(event)
            case events_pb2.AllocationRequested():
                self._requested(event, at)
            case events_pb2.AllocationAssigned():
                self._assigned(event, at)
            case (
                events_pb2.AllocationStopRequested()
                | events_pb2.AllocationStopWithdrawn()
                | events_pb2.AllocationKillRequested()
            ):
                self._stops_changed(event, envelope.event_id, at)
            case events_pb2.AllocationExited() | events_pb2.AllocationCanceled():
                self._ended(event.allocation_id, at)

    def response(self, queue: PublishedQueue) -> api_pb2.GetWorkloadResponse:
        """The window's workload, with each pool's scheduler as the scheduler published it."""
        response = api_pb2.GetWorkloadResponse(last_sequence=self.last_sequence)
        for opened in self.allocations.values():
            recorded = opened.recorded
            if not self._in_window(recorded):
                continue
            if recorded.assigned_at_ns and not recorded.ended_at_ns:
                recorded.run_ns = max(self.last_ns - recorded.assigned_at_ns, 0)
            response.allocations.append(recorded)
        for agent in self.agents:
            if (not self.until_ns or agent.registered_at_ns <= self.until_ns) and (
                not agent.lost_at_ns or agent.lost_at_ns > self.since_ns
            ):
                response.agents.append(agent)
        firsts = [a.requested_sequence for a in response.allocations] + [
            a.registered_sequence for a in response.agents
        ]
        response.first_sequence = min(firsts, default=0)
        pools = {a.resource_pool for a in response.allocations} | {a.resource_pool for a in response.agents}
        for pool in sorted(pools):
            response.pool_schedulers[pool] = queue.scheduler_of(pool)
        return response

    def _in_window(self, recorded: api_pb2.RecordedAllocation) -> bool:
        if self.until_ns and recorded.requested_at_ns > self.until_ns:
            return False
        # Requested before the window: in while it was still open when the window began.
        return recorded.requested_at_ns >= self.since_ns or not (
            recorded.ended_at_ns and recorded.ended_at_ns <= self.since_ns
        )

    def _registered(self, event: events_pb2.AgentRegistered, event_id: str, at: tuple[int, int]) -> None:
        agent = api_pb2.RecordedAgent(
            agent_id=event.agent_id,
            resource_pool=event.resource_pool or DEFAULT_POOL,
            slots=len(event.slots),
            registered_at_ns=at[0],
            registered_sequence=at[1],
        )
        self.registrations[event.agent_id] = (event_id, len(self.agents))
        self.agents.append(agent)

    def _lost(self, event: events_pb2.AgentLost, at: tuple[int, int]) -> None:
        registration = self.registrations.get(event.agent_id)
        if registration is None or registration[0] != event.registration_event_id:
            return  # an older registration's loss, as the scheduler reads it
        agent = self.agents[registration[1]]
        if not agent.lost_at_ns:
            agent.lost_at_ns, agent.lost_sequence = at

    def _job_changed(self, event: events_pb2.JobResourcesChanged) -> None:
        before = self.jobs.get(event.job_id, _JobOverride())
        self.jobs[event.job_id] = _JobOverride(
            priority=event.priority if event.HasField("priority") else before.priority,
            weight=event.weight if event.HasField("weight") else before.weight,
            max_slots=event.max_slots if event.HasField("max_slots") else before.max_slots,
        )

    def _requested(self, event: events_pb2.AllocationRequested, at: tuple[int, int]) -> None:
        if event.allocation_id in self.allocations:
            return
        if self.until_ns and at[0] > self.until_ns:
            return
        if len(self.allocations) >= MAX_ALLOCATIONS:
            raise FailedPreconditionError(
                f"the workload holds more than {MAX_ALLOCATIONS:,} allocations: narrow it with --since and --until"
            )
        job_id = event.job_id or f"task/{event.task_id}"
        recorded = api_pb2.RecordedAllocation(
            allocation_id=event.allocation_id,
            task_id=event.task_id,
            job_id=job_id,
            task_type=event.task_type or "TRIAL",
            owner=event.owner,
            resource_pool=event.resource_pool or DEFAULT_POOL,
            slots=event.slots,
            preemptible=event.preemptible,
            requested_at_ns=at[0],
            requested_sequence=at[1],
        )
        self._settings_in_force(recorded, event)
        self.allocations[event.allocation_id] = _Open(recorded)

    def _settings_in_force(
        self, recorded: api_pb2.RecordedAllocation, event: events_pb2.AllocationRequested
    ) -> None:
        """The job's priority, weight and max_slots as the scheduler works them
        out (services/scheduler/pool.py), with the job's changes so far."""
        override = self.jobs.get(recorded.job_id, _JobOverride())
        recorded.priority = event.priority or self.default_priority
        recorded.weight = event.weight if event.weight > 0 else DEFAULT_WEIGHT
        recorded.max_slots = event.max_slots
        if override.priority is not None:
            recorded.priority = override.priority or self.default_priority
        if override.weight is not None and override.weight > 0:
            recorded.weight = override.weight
        if override.max_slots is not None:
            recorded.max_slots = override.max_slots

    def _assigned(self, event: events_pb2.AllocationAssigned, at: tuple[int, int]) -> None:
        opened = self.allocations.get(event.allocation_id)
        if opened is None or opened.recorded.assigned_at_ns or opened.recorded.ended_at_ns:
            return
        opened.recorded.assigned_at_ns, opened.recorded.assigned_sequence = at
        opened.recorded.placements.extend(event.placements)

    def _stops_changed(
        self,
        event: events_pb2.AllocationStopRequested
        | events_pb2.AllocationStopWithdrawn
        | events_pb2.AllocationKillRequested,
        event_id: str,
        at: tuple[int, int],
    ) -> None:
        opened = self.allocations.get(event.allocation_id)
        if opened is None or opened.recorded.ended_at_ns:
            return
        before = opened.stops.requested or opened.kill_requested
        if isinstance(event, events_pb2.AllocationKillRequested):
            opened.kill_requested = True
        else:
            opened.stops = opened.stops.folded(event_id, event)
        after = opened.stops.requested or opened.kill_requested
        recorded = opened.recorded
        if after and not before:
            recorded.stop_requested_at_ns, recorded.stop_sequence = at
            recorded.preempted = event_id.startswith(PREEMPT_ID_PREFIX)
        elif before and not after:
            recorded.stop_requested_at_ns = recorded.stop_sequence = 0
            recorded.preempted = False

    def _ended(self, allocation_id: str, at: tuple[int, int]) -> None:
        opened = self.allocations.get(allocation_id)
        if opened is None or opened.recorded.ended_at_ns:
            return
        recorded = opened.recorded
        recorded.ended_at_ns, recorded.ended_sequence = at
        if recorded.assigned_at_ns:
            recorded.run_ns = max(at[0] - recorded.assigned_at_ns, 0)
        if recorded.requested_at_ns < self.since_ns and at[0] <= self.since_ns:
            del self.allocations[allocation_id]  # over before the window
