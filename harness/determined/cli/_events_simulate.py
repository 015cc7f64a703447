"""`det events simulate`: what-if scheduling. The gateway gives the recorded
workload (GetWorkload: arrivals, slot requests, how long each allocation ran;
admins only); this command replays it through the scheduler's pure core
(services/scheduler/simulate.py, run here, on the caller's machine) under
other settings, and prints per job the queue time and slot-seconds beside
what really happened. Under the recorded settings it also says whether the
simulation made the recorded assignments."""

import argparse
from typing import TYPE_CHECKING, Any

from determined.cli._client import CliError, connect
from determined.cli._output import format_time, print_json, print_table
from determined.cli.deploy import _non_negative_float, _positive

if TYPE_CHECKING:
    from determined.proto import api_pb2
    from services.scheduler.simulate import Settings
    from services.scheduler.simulate_report import Figures, JobLine, Report

SCHEDULERS = ("fair_share", "priority")
# GetWorkload reads the log's allocation, agent and experiment events: minutes on a long log.
WORKLOAD_TIMEOUT_S = 600.0
NOT_INSTALLED = (
    "det events simulate needs determined-es's services installed (the project's package): it runs the "
    "scheduler's core here; install determined-es where you run it, or run it on the master's machine"
)
HEADERS = [
    "Job",
    "Owner",
    "Allocations",
    "Queue (recorded)",
    "Queue (simulated)",
    "Slot-seconds (recorded)",
    "Slot-seconds (simulated)",
]


def add_simulate_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from determined.cli.events import moment_ns

    parser = subparsers.add_parser(
        "simulate",
        help="replay the recorded workload through the scheduler under other settings (admins)",
        description="Replays the allocations requested in the window (their arrivals, slot requests and"
        " how long each ran) through the scheduler's core, and prints per job the queue time and"
        " slot-seconds within the window, recorded and simulated. Without options it simulates the"
        " settings that ran, which must reproduce the recorded assignments.",
    )
    parser.add_argument(
        "--since", type=moment_ns, metavar="TIME", help="from TIME: ISO 8601 (UTC), or 30m, 2h, 7d ago"
    )
    parser.add_argument("--until", type=moment_ns, metavar="TIME", help="up to TIME (as --since)")
    parser.add_argument(
        "--scheduler", choices=SCHEDULERS, help="every pool's scheduler (default: as recorded)"
    )
    parser.add_argument(
        "--agents", type=_positive, metavar="N", help="N agents per pool instead of the recorded ones"
    )
    parser.add_argument(
        "--slots", type=_positive, metavar="K", help="K slots per agent (with --agents, or alone)"
    )
    parser.add_argument(
        "--min-run-s",
        type=_non_negative_float,
        default=30.0,
        metavar="S",
        help="the scheduler's minimum run before a preemption, DET_SCHEDULER_MIN_RUN_S (default 30)",
    )
    parser.add_argument("--json", action="store_true", help="the figures as JSON (seconds)")
    parser.set_defaults(run=simulate)


def simulate(args: argparse.Namespace) -> int:
    try:
        import services.scheduler.simulate as simulation
        import services.scheduler.simulate_report as simulate_report
    except ImportError:
        raise CliError(NOT_INSTALLED) from None
    from determined.proto import api_pb2

    gateway = connect(args)
    request = api_pb2.GetWorkloadRequest(since_ns=args.since or 0, until_ns=args.until or 0)
    workload = gateway.call(gateway.stub.GetWorkload, request, timeout=WORKLOAD_TIMEOUT_S)
    if not workload.allocations:
        print("No allocation was requested in that window")
        return 0
    settings = simulation.Settings(args.scheduler, args.agents, args.slots, args.min_run_s)
    outcome = simulation.simulate(workload, settings, end_ns=args.until or 0)
    report = simulate_report.report(workload, outcome, start_ns=args.since or 0)
    as_recorded = simulation.as_recorded(workload, settings)
    if args.json:
        print_json(report_dict(workload, settings, report, as_recorded))
    else:
        print("\n".join(header_lines(workload, settings, report)))
        print_table(HEADERS, table_rows(report))
        if as_recorded:
            print(reproduction_line(report))
    return 0


def header_lines(
    workload: "api_pb2.GetWorkloadResponse", settings: "Settings", report: "Report"
) -> list[str]:
    """What was simulated: the window, the settings that ran and those simulated."""
    jobs = len(report.jobs)
    return [
        f"Workload: {len(workload.allocations):,} allocations of {jobs:,} jobs, "
        f"{format_time(report.start_ns)} to {format_time(report.end_ns)} UTC "
        f"(sequences {workload.first_sequence:,} to {workload.last_sequence:,})",
        f"Recorded:  {recorded_schedulers(workload)} on {recorded_agents(workload)}",
        f"Simulated: {simulated_schedulers(workload, settings)} on {simulated_agents(workload, settings)}",
        "",
    ]


def table_rows(report: "Report") -> list[list[str]]:
    """One row per job, in the order of its first request, then the total."""
    return [_row(line) for line in report.jobs] + [_row(report.total, total=True)]


def reproduction_line(report: "Report") -> str:
    if report.reproduced == report.assignments:
        return (
            f"The simulation made the {report.assignments:,} recorded assignments, in the recorded order,"
            " on the same agents and slots."
        )
    return (
        f"The simulation made the first {report.reproduced:,} of {report.assignments:,} recorded"
        f" assignments, then departs from the recording at {report.difference}."
    )


def report_dict(
    workload: "api_pb2.GetWorkloadResponse", settings: "Settings", report: "Report", as_recorded: bool
) -> dict[str, Any]:
    """--json: the window, both settings, and per job (and in all) the figures in seconds."""
    return {
        "start_ns": report.start_ns,
        "end_ns": report.end_ns,
        "first_sequence": workload.first_sequence,
        "last_sequence": workload.last_sequence,
        "recorded": {"schedulers": recorded_schedulers(workload), "agents": recorded_agents(workload)},
        "simulated": {
            "schedulers": simulated_schedulers(workload, settings),
            "agents": simulated_agents(workload, settings),
            "min_run_s": settings.min_run_s,
        },
        "jobs": [_line_dict(line) for line in report.jobs],
        "total": _line_dict(report.total),
        "assignments": report.assignments,
        "reproduced": report.reproduced if as_recorded else None,
        "difference": report.difference if as_recorded else None,
    }


def recorded_schedulers(workload: "api_pb2.GetWorkloadResponse") -> str:
    """Each pool's scheduler as it ran: "fair_share", or "pool a: priority, pool b: fair_share"."""
    pools = dict(workload.pool_schedulers)
    if len(set(pools.values())) <= 1:
        return next(iter(pools.values()), "fair_share")
    return ", ".join(f"pool {pool}: {kind}" for pool, kind in sorted(pools.items()))


def simulated_schedulers(workload: "api_pb2.GetWorkloadResponse", settings: "Settings") -> str:
    return settings.scheduler or recorded_schedulers(workload)


def recorded_agents(workload: "api_pb2.GetWorkloadResponse") -> str:
    """The agents as they registered (the newest registration of each): "4 agents (16 slots)"."""
    slots = {agent.agent_id: agent.slots for agent in workload.agents}
    return f"{_count(len(slots), 'agent')} ({_count(sum(slots.values()), 'slot')})"


def simulated_agents(workload: "api_pb2.GetWorkloadResponse", settings: "Settings") -> str:
    if settings.agents is None and settings.slots is None:
        return recorded_agents(workload)
    from services.scheduler.simulate_workload import agents_of

    made = agents_of(workload, settings.agents, settings.slots)
    return f"{_count(len(made), 'agent')} ({_count(sum(agent.slots for agent in made), 'slot')})"


def duration(ns: int) -> str:
    """A duration for people: 0:00:07, 3:16:54, 2d 4:00:00."""
    seconds = round(ns / 1e9)
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    clock = f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{days}d {clock}" if days else clock


def _row(line: "JobLine", total: bool = False) -> list[str]:
    return [
        "Total" if total else line.job_id,
        line.owner,
        f"{line.allocations:,}",
        duration(line.recorded.queue_ns),
        duration(line.simulated.queue_ns),
        f"{round(line.recorded.slot_ns / 1e9):,}",
        f"{round(line.simulated.slot_ns / 1e9):,}",
    ]


def _line_dict(line: "JobLine") -> dict[str, Any]:
    return {
        "job_id": line.job_id,
        "owner": line.owner,
        "allocations": line.allocations,
        "recorded": _figures_dict(line.recorded),
        "simulated": _figures_dict(line.simulated),
    }


def _figures_dict(figures: "Figures") -> dict[str, float]:
    return {"queue_s": figures.queue_ns / 1e9, "slot_seconds": figures.slot_ns / 1e9}


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"
