"""A recorded workload (GetWorkload's answer) as the work a simulation
replays (simulate.py): each allocation's work and what bounds it, chained
per task, and the agents.

An allocation's work is how long it ran (`run_ns`; None: it was still running
when the log ended, or never ran). What ended it besides its own end is kept
relative to it, so that it happens again under other settings: a stop that
was not the scheduler's (the searcher's cut, a pause, a kill) at the same
point of its run (or, for one stopped while it waited, as long after its
request), and how long it took to go once asked (`latency_ns`). A task's
allocations follow each other: the next one is asked for as long after the
one before ended as it was in the log. The scheduler's own preemptions are
not part of the work: the simulated scheduler decides its own.
"""

import statistics
from dataclasses import dataclass

from determined.proto import api_pb2
from services.common.scheduling import DEFAULT_POOL

# An agent's slots when a simulation sets the number of agents only and the pool had none.
DEFAULT_AGENT_SLOTS = 1


@dataclass
class Work:
    recorded: api_pb2.RecordedAllocation
    # How long it runs in all; None: until stopped (or for ever).
    run_ns: int | None
    # A stop that is not the scheduler's: after this much of its run...
    stop_after_ns: int | None
    # ...or, for one stopped before it was ever assigned, this long after its request.
    stop_waiting_ns: int | None
    # How long it takes to exit once asked to stop.
    latency_ns: int
    # The task's next allocation, asked for `gap_ns` after this one ends.
    next: "Work | None" = None
    gap_ns: int = 0


@dataclass(frozen=True)
class SimAgent:
    agent_id: str
    resource_pool: str
    slots: int
    registered_at_ns: int
    registered_sequence: float
    # 0: never lost.
    lost_at_ns: int = 0
    lost_sequence: float = 0


def works_of(workload: api_pb2.GetWorkloadResponse) -> list[Work]:
    """Each task's first allocation's work (the others hang off `next`), in request order."""
    latency = _typical_latency(workload.allocations)
    works = [_work(recorded, latency) for recorded in workload.allocations]
    last_of_task: dict[str, Work] = {}
    heads: list[Work] = []
    for work in works:
        before = last_of_task.get(work.recorded.task_id)
        if before is not None and before.recorded.ended_at_ns and before.next is None:
            before.next = work
            before.gap_ns = max(work.recorded.requested_at_ns - before.recorded.ended_at_ns, 0)
        else:
            heads.append(work)
        last_of_task[work.recorded.task_id] = work
    return heads


def agents_of(
    workload: api_pb2.GetWorkloadResponse, agents: int | None = None, slots: int | None = None
) -> list[SimAgent]:
    """The recorded agents; with `agents` or `slots`, instead that many agents
    of that many slots in each pool (the other as recorded: the most slots
    an agent of the pool had, the number of agents the pool had), there
    from the workload's first moment."""
    if agents is None and slots is None:
        return [
            SimAgent(
                a.agent_id,
                a.resource_pool,
                a.slots,
                a.registered_at_ns,
                a.registered_sequence,
                a.lost_at_ns,
                a.lost_sequence,
            )
            for a in workload.agents
        ]
    moments = [a.requested_at_ns for a in workload.allocations] + [
        a.registered_at_ns for a in workload.agents
    ]
    start = min(moments, default=0)
    pools = sorted(
        {a.resource_pool for a in workload.agents} | {a.resource_pool for a in workload.allocations}
    )
    made = []
    for pool in pools or [DEFAULT_POOL]:
        recorded = [a for a in workload.agents if a.resource_pool == pool]
        count = agents if agents is not None else len({a.agent_id for a in recorded})
        size = slots if slots is not None else max((a.slots for a in recorded), default=DEFAULT_AGENT_SLOTS)
        prefix = "sim" if pool == DEFAULT_POOL else f"{pool}-sim"
        made += [SimAgent(f"{prefix}-{number}", pool, size, start, 0) for number in range(1, count + 1)]
    return made


def _work(recorded: api_pb2.RecordedAllocation, typical_latency_ns: int) -> Work:
    assigned = recorded.assigned_at_ns
    ended = recorded.ended_at_ns
    stop = recorded.stop_requested_at_ns
    outside_stop = bool(stop) and not recorded.preempted
    latency = max(ended - stop, 0) if stop and ended and assigned else typical_latency_ns
    return Work(
        recorded,
        run_ns=recorded.run_ns if assigned and ended else None,
        stop_after_ns=max(stop - assigned, 0) if outside_stop and assigned else None,
        stop_waiting_ns=max(stop - recorded.requested_at_ns, 0) if outside_stop and not assigned else None,
        latency_ns=latency,
    )


def _typical_latency(allocations: "list[api_pb2.RecordedAllocation]") -> int:
    """The median time from a stop to the exit among the allocations that ran
    when asked (0 when none did)."""
    latencies = [
        a.ended_at_ns - a.stop_requested_at_ns
        for a in allocations
        if a.stop_requested_at_ns and a.ended_at_ns and a.assigned_at_ns
    ]
    return int(statistics.median(latencies)) if latencies else 0
