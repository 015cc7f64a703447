"""What a simulation (simulate.py) says beside what really happened: per
job, how long its allocations waited in the queue and how many slot-seconds
they held within the window, recorded and simulated; and whether the
simulation made the recorded assignments (same allocations, agents and
slots, in the same order)."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from determined.proto import api_pb2
from services.scheduler.simulate import Outcome, Run

Placements = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass
class Figures:
    # Nanoseconds waited in the queue, summed over the job's allocations.
    queue_ns: int = 0
    # Slots held times nanoseconds held.
    slot_ns: int = 0


@dataclass
class JobLine:
    job_id: str
    owner: str = ""
    allocations: int = 0
    recorded: Figures = field(default_factory=Figures)
    simulated: Figures = field(default_factory=Figures)


@dataclass(frozen=True)
class Report:
    start_ns: int
    end_ns: int
    # In the order of their first requests.
    jobs: list[JobLine]
    total: JobLine
    # How many of the recorded assignments, from the first, the simulation made the same.
    reproduced: int
    assignments: int
    # The first assignment that differs, in words ("" when none does).
    difference: str


def report(workload: api_pb2.GetWorkloadResponse, outcome: Outcome, start_ns: int = 0) -> Report:
    """The figures within [start_ns (0: the first request), the simulation's end]."""
    start = start_ns or min((a.requested_at_ns for a in workload.allocations), default=0)
    end = outcome.end_ns
    jobs: dict[str, JobLine] = {}
    for recorded in workload.allocations:
        line = jobs.setdefault(recorded.job_id, JobLine(recorded.job_id, recorded.owner))
        line.allocations += 1
        _add(
            line.recorded,
            recorded.slots,
            recorded.requested_at_ns,
            recorded.assigned_at_ns,
            recorded.ended_at_ns,
            start,
            end,
        )
    for run in outcome.runs:
        line = jobs.setdefault(run.recorded.job_id, JobLine(run.recorded.job_id, run.recorded.owner))
        _add(
            line.simulated,
            run.recorded.slots,
            run.requested_at_ns,
            run.assigned_at_ns,
            run.ended_at_ns,
            start,
            end,
        )
    total = JobLine("total", allocations=sum(line.allocations for line in jobs.values()))
    for line in jobs.values():
        for mine, all_jobs in ((line.recorded, total.recorded), (line.simulated, total.simulated)):
            all_jobs.queue_ns += mine.queue_ns
            all_jobs.slot_ns += mine.slot_ns
    recorded_order = recorded_assignments(workload.allocations)
    reproduced, difference = _compared(recorded_order, outcome.assigned)
    return Report(start, end, list(jobs.values()), total, reproduced, len(recorded_order), difference)


def recorded_assignments(
    allocations: Iterable[api_pb2.RecordedAllocation],
) -> list[tuple[str, Placements]]:
    """(allocation id, placements) of each recorded assignment, in the order they were made."""
    assigned = sorted((a for a in allocations if a.assigned_sequence), key=lambda a: a.assigned_sequence)
    return [(a.allocation_id, tuple((p.agent_id, tuple(p.slot_ids)) for p in a.placements)) for a in assigned]


def simulated_assignments(runs: Iterable[Run]) -> list[tuple[str, Placements]]:
    """(allocation id, placements) of each simulated assignment, in order (a
    preempted allocation's rest is named "<id>~<part>")."""
    return [(run.allocation_id, run.placements) for run in runs]


def _compared(recorded: list[tuple[str, Placements]], runs: list[Run]) -> tuple[int, str]:
    simulated = simulated_assignments(runs)
    for index, (was, now) in enumerate(zip(recorded, simulated, strict=False)):
        if was != now:
            return index, f"assignment {index + 1}: recorded {_said(was)}, simulated {_said(now)}"
    if len(recorded) != len(simulated):
        index = min(len(recorded), len(simulated))
        more = "recorded" if len(recorded) > len(simulated) else "simulated"
        extra = (recorded if more == "recorded" else simulated)[index]
        return index, f"assignment {index + 1}: only {more}: {_said(extra)}"
    return len(recorded), ""


def _said(assignment: tuple[str, Placements]) -> str:
    allocation_id, placements = assignment
    where = ", ".join(f"{agent_id} slots {list(slot_ids)}" for agent_id, slot_ids in placements)
    return f"allocation {allocation_id} on {where or 'no agent'}"


def _add(
    figures: Figures, slots: int, requested: int, assigned: int, ended: int, start: int, end: int
) -> None:
    """Adds one allocation's wait and slot time within [start, end] (0: not yet)."""
    figures.queue_ns += _overlap(requested, assigned or ended or end, start, end)
    if assigned:
        figures.slot_ns += slots * _overlap(assigned, ended or end, start, end)


def _overlap(begin: int, finish: int, start: int, end: int) -> int:
    return max(min(finish, end) - max(begin, start), 0)
