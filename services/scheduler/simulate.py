"""What-if scheduling (`det events simulate`): a recorded workload replayed
through the scheduler's pure core (state.py `evolve`/`tick`, core.py
`decide`) on a virtual clock, under the recorded settings or others. No I/O.

The workload (simulate_workload.py) arrives as it did: each task's first
allocation when it was asked for, the next one as long after the one before
ended as in the log. An assigned allocation runs for its recorded time, then
exits; a stop that was not the scheduler's comes at the same point of its
run; one the scheduler asks for (a preemption) ends it as long after as a
stop took it, and it is asked for again with the rest of its run. An
allocation the log still held at its end runs on.

The core decides as the scheduler's shell lets it, after the events it
folds, and at the moments the recorded scheduler preempted (it looked at the
clock then). Under the settings that ran it decides between two recorded
events only where the recorded scheduler did (the log's order is the order
it saw them in; bench/gen_log.py's cores answer a whole cascade at once),
and its events take the recorded times (a scheduler appends a moment after
the event it answers): the simulation makes the recorded assignments, in
the recorded order, with the recorded waits. Under other settings it
decides after each moment's events, and a second after a minimum run time
ends (the shell's clock tick), when a preemption may go through.
"""

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from enum import IntEnum
from math import inf, isinf

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, Envelope, wrap
from services.common.scheduling import FAIR_SHARE
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import decide
from services.scheduler.simulate_workload import SimAgent, Work, agents_of, works_of
from services.scheduler.state import SchedulerState, evolve, tick

# With no event, the scheduler looks at the clock this often (its shell's TICK_S):
# a preemption that waits for a minimum run time comes at most this late.
TICK_NS = 10**9
# The most decisions in a row the core may make on one event before the simulation gives up.
MAX_SETTLE_ROUNDS = 1000
SIM_ACTOR = "service:simulation"
SCHEDULER_ACTOR = "service:scheduler"
PREEMPT_ID_PREFIX = "allocation-preempt-"


class Kind(IntEnum):
    AGENT_UP = 0
    AGENT_LOST = 1
    ARRIVE = 2
    STOP = 3
    EXIT = 4
    TICK = 5


@dataclass
class Run:
    """One simulated allocation: a recorded allocation's work, or the rest of
    it after a preemption (`part` 1, 2, ...)."""

    work: Work
    part: int
    allocation_id: str
    # The work done before this part.
    done_ns: int
    requested_at_ns: int
    assigned_at_ns: int = 0
    # 0: it had not ended when the simulation did.
    ended_at_ns: int = 0
    placements: tuple[tuple[str, tuple[int, ...]], ...] = ()
    preempted: bool = False
    stopped: bool = False

    @property
    def recorded(self) -> api_pb2.RecordedAllocation:
        return self.work.recorded


@dataclass
class Outcome:
    # Every simulated allocation, in request order.
    runs: list[Run]
    # The runs in the order they were assigned.
    assigned: list[Run]
    # The simulation's end: nothing after it was simulated.
    end_ns: int


# (when, the recorded sequence it stands for (inf when none): one moment's
# order, a count that keeps pushes in order, what happens, to what). A tuple:
# the heap compares thousands of them.
_Event = tuple[int, float, int, Kind, "Run | SimAgent | None"]


@dataclass
class Simulation:
    config: SchedulerConfig
    # The recorded scheduler's decisions (assignments, preemptions, cancellations), by sequence.
    decisions: list[float]
    end_ns: int
    # Under the settings that ran: the core decides when (and only when) the
    # recorded scheduler did, at the recorded moments it preempted; else after
    # each moment's events and a tick after each minimum run time ends.
    as_recorded: bool
    state: SchedulerState = field(default_factory=SchedulerState)
    queue: list[_Event] = field(default_factory=list)
    runs: dict[str, Run] = field(default_factory=dict)
    assigned: list[Run] = field(default_factory=list)
    registrations: dict[str, str] = field(default_factory=dict)
    count: int = 0
    # Something was folded since the core last decided.
    unsettled: bool = False

    def run(self) -> Outcome:
        while self.queue:
            at, order, _, kind, subject = heapq.heappop(self.queue)
            if at > self.end_ns:
                break
            # A stale event (a run that ended already) changes nothing, but may close a moment.
            self.unsettled = self._happened(at, kind, subject) or self.unsettled
            if self.unsettled and self._decides_after(at, order, kind):
                self._settle(at)
                self.unsettled = False
        return Outcome(list(self.runs.values()), self.assigned, self.end_ns)

    def push(self, at_ns: int, order: float, kind: Kind, subject: "Run | SimAgent | None") -> None:
        self.count += 1
        heapq.heappush(self.queue, (at_ns, order, self.count, kind, subject))

    def _happened(self, at: int, kind: Kind, subject: "Run | SimAgent | None") -> bool:
        """Folds the event; False when it no longer applies (a run that ended already)."""
        match kind:
            case Kind.AGENT_UP:
                assert isinstance(subject, SimAgent)
                self._agent_up(subject, at)
            case Kind.AGENT_LOST:
                assert isinstance(subject, SimAgent)
                self._fold("agent_lost", _agent_lost(subject, self.registrations[subject.agent_id]), at)
            case Kind.ARRIVE:
                assert isinstance(subject, Run)
                self._arrive(subject, at)
            case Kind.STOP:
                assert isinstance(subject, Run)
                return self._stop(subject, at)
            case Kind.EXIT:
                assert isinstance(subject, Run)
                return self._exit(subject, at)
            case Kind.TICK:
                self.state = tick(self.state, at)
        return True

    def _decides_after(self, at: int, order: float, kind: Kind) -> bool:
        """Whether the core decides now: unless the recorded scheduler decided
        nothing between this event and the next, both recorded ones and (but
        under the recorded settings) of the same moment."""
        if kind in (Kind.TICK, Kind.AGENT_UP, Kind.AGENT_LOST) or not self.queue:
            return True
        following_at, following_order = self.queue[0][:2]
        recorded = self.as_recorded and not isinf(order) and not isinf(following_order)
        if following_at != at and not recorded:
            return True
        index = bisect_right(self.decisions, order)
        return index < len(self.decisions) and self.decisions[index] < following_order

    def _settle(self, now_ns: int) -> None:
        for _ in range(MAX_SETTLE_ROUNDS):
            appends = decide(self.state, self.config)
            if not appends:
                return
            for append in appends:
                self._decided(append, now_ns)
        raise RuntimeError(f"the scheduler's decisions did not settle at {now_ns}")

    def _decided(self, append: Append, now_ns: int) -> None:
        event = append.payload
        run = self.runs.get(getattr(event, "allocation_id", ""))
        at = now_ns if run is None else self._when_decided(run, append, now_ns)
        self.state = evolve(self.state, wrap(append, actor=SCHEDULER_ACTOR, occurred_at_ns=at))
        if run is None:
            return
        match event:
            case events_pb2.AllocationAssigned():
                self._assigned(run, event, at)
            case events_pb2.AllocationStopRequested():
                run.preempted = run.preempted or append.msg_id.startswith(PREEMPT_ID_PREFIX)
                self._exit_after_stop(run, at)
            case events_pb2.AllocationCanceled() | events_pb2.AllocationExited():
                self._ended(run, at)

    def _when_decided(self, run: Run, append: Append, now_ns: int) -> int:
        """When the scheduler's event is stamped: under the settings that ran,
        the recorded time of the same decision when it falls between now and
        the next event (a scheduler appends a moment after the event it
        answers), else now."""
        recorded = run.recorded
        if not self.as_recorded or run.part:
            return now_ns
        match append.payload:
            case events_pb2.AllocationAssigned():
                moment = recorded.assigned_at_ns
            case events_pb2.AllocationStopRequested() if recorded.preempted:
                moment = recorded.stop_requested_at_ns
            case events_pb2.AllocationCanceled() if not recorded.assigned_at_ns:
                moment = recorded.ended_at_ns
            case events_pb2.AllocationExited():  # its agent was lost
                moment = recorded.ended_at_ns
            case _:
                return now_ns
        following = self.queue[0][0] if self.queue else self.end_ns + 1
        return moment if now_ns <= moment <= following else now_ns

    def _agent_up(self, agent: SimAgent, at: int) -> None:
        event_id = f"sim-registered-{agent.agent_id}-{at}"
        self.registrations[agent.agent_id] = event_id
        slots = [events_pb2.Slot(slot_id=n) for n in range(agent.slots)]
        registered = events_pb2.AgentRegistered(
            agent_id=agent.agent_id, hostname=agent.agent_id, resource_pool=agent.resource_pool, slots=slots
        )
        self._fold("agent_registered", registered, at, event_id)

    def _arrive(self, run: Run, at: int) -> None:
        self.runs[run.allocation_id] = run
        self._fold("allocation_requested", _requested(run), at)
        waiting = run.work.stop_waiting_ns
        if run.part == 0 and waiting is not None:
            self.push(at + waiting, _order(run.recorded.stop_sequence), Kind.STOP, run)

    def _assigned(self, run: Run, event: events_pb2.AllocationAssigned, at: int) -> None:
        run.assigned_at_ns = at
        run.placements = tuple((p.agent_id, tuple(p.slot_ids)) for p in event.placements)
        self.assigned.append(run)
        work = run.work
        if work.run_ns is not None:
            self.push(
                at + max(work.run_ns - run.done_ns, 0), _order(run.recorded.ended_sequence), Kind.EXIT, run
            )
        if work.stop_after_ns is not None:
            stop_at = at + max(work.stop_after_ns - run.done_ns, 0)
            self.push(stop_at, _order(run.recorded.stop_sequence), Kind.STOP, run)
        if run.recorded.preemptible and not self.as_recorded:
            self.push(at + self.config.min_run_ns + TICK_NS, inf, Kind.TICK, run)

    def _stop(self, run: Run, at: int) -> bool:
        """A stop that is not the scheduler's: the run's work ends with it."""
        if run.ended_at_ns or run.stopped:
            return False
        run.stopped = True
        stop = events_pb2.AllocationStopRequested(
            allocation_id=run.allocation_id, task_id=run.recorded.task_id
        )
        self._fold("allocation_stop_requested", stop, at, f"sim-stop-{run.allocation_id}")
        if run.assigned_at_ns:
            self._exit_after_stop(run, at)
        return True

    def _exit_after_stop(self, run: Run, at: int) -> None:
        self.push(at + run.work.latency_ns, _order(run.recorded.ended_sequence), Kind.EXIT, run)

    def _exit(self, run: Run, at: int) -> bool:
        if run.ended_at_ns or not run.assigned_at_ns:
            return False
        agent_id = run.placements[0][0] if run.placements else ""
        exited = events_pb2.AllocationExited(
            allocation_id=run.allocation_id, task_id=run.recorded.task_id, agent_id=agent_id
        )
        self._fold("allocation_exited", exited, at)
        self._ended(run, at)
        return True

    def _ended(self, run: Run, at: int) -> None:
        """The run is over: the rest of its work asked for again after a
        preemption (or a lost agent), else the task's next allocation."""
        run.ended_at_ns = at
        work = run.work
        done = run.done_ns + (at - run.assigned_at_ns if run.assigned_at_ns else 0)
        left = work.run_ns is None or done < work.run_ns
        if run.assigned_at_ns and left and not run.stopped:
            part = run.part + 1
            rest = Run(work, part, f"{work.recorded.allocation_id}~{part}", done, at)
            self.push(at, _order(work.recorded.ended_sequence) + 0.5, Kind.ARRIVE, rest)
        elif work.next is not None:
            self.push_arrival(work.next, at + work.gap_ns)

    def push_arrival(self, work: Work, at: int) -> None:
        run = Run(work, 0, work.recorded.allocation_id, 0, at)
        self.push(at, _order(work.recorded.requested_sequence), Kind.ARRIVE, run)

    def _fold(self, field_name: str, payload: object, at: int, event_id: str = "") -> None:
        envelope = Envelope(
            event_id=event_id or f"sim-{self.count}-{field_name}", occurred_at_ns=at, actor=SIM_ACTOR
        )
        getattr(envelope, field_name).CopyFrom(payload)
        self.count += 1
        self.state = evolve(self.state, envelope)


@dataclass(frozen=True)
class Settings:
    """What a simulation changes (None: as recorded)."""

    # Every pool's scheduler: "fair_share" or "priority".
    scheduler: str | None = None
    # That many agents of that many slots in each pool instead of the recorded agents.
    agents: int | None = None
    slots: int | None = None
    # The scheduler's DET_SCHEDULER_MIN_RUN_S (its setting is not in the log).
    min_run_s: float = SchedulerConfig().min_run_s


def simulate(
    workload: api_pb2.GetWorkloadResponse, settings: Settings = Settings(), end_ns: int = 0
) -> Outcome:
    """The workload replayed under `settings` up to `end_ns` (0: the workload's last recorded moment)."""
    config = config_of(workload, settings)
    recorded = as_recorded(workload, settings)
    simulation = Simulation(config, _decisions(workload), end_ns or last_moment(workload), recorded)
    for agent in agents_of(workload, settings.agents, settings.slots):
        simulation.push(agent.registered_at_ns, agent.registered_sequence, Kind.AGENT_UP, agent)
        if agent.lost_at_ns:
            simulation.push(agent.lost_at_ns, agent.lost_sequence, Kind.AGENT_LOST, agent)
    for work in works_of(workload):
        simulation.push_arrival(work, work.recorded.requested_at_ns)
    for allocation in workload.allocations:
        if allocation.preempted:
            simulation.push(allocation.stop_requested_at_ns, allocation.stop_sequence - 0.5, Kind.TICK, None)
    return simulation.run()


def as_recorded(workload: api_pb2.GetWorkloadResponse, settings: Settings) -> bool:
    """Whether `settings` are those that ran (the minimum run time aside: the log does not say it)."""
    if settings.agents is not None or settings.slots is not None:
        return False
    simulated = config_of(workload, settings)
    recorded = config_of(workload, Settings())
    return all(simulated.type_of(pool) == recorded.type_of(pool) for pool in workload.pool_schedulers)


def config_of(workload: api_pb2.GetWorkloadResponse, settings: Settings) -> SchedulerConfig:
    """The scheduler's configuration: each pool's recorded scheduler, or the one `settings` names for all."""
    if settings.scheduler is not None:
        return SchedulerConfig(default_type=settings.scheduler, min_run_s=settings.min_run_s)
    pool_types = {pool: kind for pool, kind in workload.pool_schedulers.items() if kind != FAIR_SHARE}
    return SchedulerConfig(pool_types=pool_types, min_run_s=settings.min_run_s)


def last_moment(workload: api_pb2.GetWorkloadResponse) -> int:
    """The workload's last recorded moment."""
    moments = [0]
    for a in workload.allocations:
        moments += [a.requested_at_ns, a.ended_at_ns, a.assigned_at_ns + a.run_ns if a.assigned_at_ns else 0]
    for agent in workload.agents:
        moments += [agent.registered_at_ns, agent.lost_at_ns]
    return max(moments)


def _decisions(workload: api_pb2.GetWorkloadResponse) -> list[float]:
    """The sequences of the recorded scheduler's decisions, in order (an
    assignment of an old log that is its own request: just after it)."""
    found: list[float] = []
    for a in workload.allocations:
        if a.assigned_sequence:
            found.append(a.assigned_sequence + (0.5 if a.assigned_sequence == a.requested_sequence else 0))
        elif a.ended_sequence:
            found.append(a.ended_sequence)  # a cancellation
        if a.preempted:
            found.append(a.stop_sequence)
    return sorted(found)


def _order(sequence: int) -> float:
    return sequence or inf


def _requested(run: Run) -> events_pb2.AllocationRequested:
    recorded = run.recorded
    requested = events_pb2.AllocationRequested(
        allocation_id=run.allocation_id,
        task_id=recorded.task_id,
        task_type=recorded.task_type,
        slots=recorded.slots,
        resource_pool=recorded.resource_pool,
        job_id=recorded.job_id,
        weight=recorded.weight,
        priority=recorded.priority,
        max_slots=recorded.max_slots,
        preemptible=recorded.preemptible,
        owner=recorded.owner,
    )
    if recorded.task_type == "TRIAL":
        requested.trial.SetInParent()
    else:
        requested.task.SetInParent()
    return requested


def _agent_lost(agent: SimAgent, registration_event_id: str) -> events_pb2.AgentLost:
    return events_pb2.AgentLost(
        agent_id=agent.agent_id, registration_event_id=registration_event_id, reason="lost, as recorded"
    )
