"""`det events simulate`'s output as pure code: the lines that name the
window and both settings, the table (per job, recorded beside simulated,
then the total), whether the recorded assignments were made, --json; and
what it says where the project's services are not installed."""

import argparse
import sys

import pytest

from determined.cli import _events_simulate as cli
from determined.cli._client import CliError
from determined.proto import api_pb2
from services.scheduler.simulate import Settings
from services.scheduler.simulate_report import Figures, JobLine, Report

S = 10**9
T0 = 1_790_000_000 * S  # 2026-09-21 14:13:20 UTC


def workload(pools: dict[str, str] | None = None) -> api_pb2.GetWorkloadResponse:
    agents = [
        api_pb2.RecordedAgent(agent_id=f"agent-{n}", resource_pool="default", slots=4) for n in range(4)
    ]
    agents.append(api_pb2.RecordedAgent(agent_id="agent-0", resource_pool="default", slots=4))  # again
    return api_pb2.GetWorkloadResponse(
        allocations=[api_pb2.RecordedAllocation(allocation_id="1.1", resource_pool="default")] * 3,
        agents=agents,
        pool_schedulers=pools or {"default": "fair_share"},
        first_sequence=1,
        last_sequence=12_345,
    )


def a_report(reproduced: int = 3, difference: str = "") -> Report:
    jobs = [
        JobLine("experiment/1", "alice", 2, Figures(90 * S, 7200 * S), Figures(30 * S, 7200 * S)),
        JobLine("task/ab12", "bob", 1, Figures(0, 3600 * S), Figures(86_400 * S + 5 * S, 1800 * S)),
    ]
    total = JobLine("total", "", 3, Figures(90 * S, 10_800 * S), Figures(86_435 * S, 9000 * S))
    return Report(T0, T0 + 3600 * S, jobs, total, reproduced, 3, difference)


def test_the_header_names_the_window_and_both_settings() -> None:
    lines = cli.header_lines(workload(), Settings(scheduler="priority", agents=2, slots=8), a_report())
    assert lines == [
        "Workload: 3 allocations of 2 jobs, 2026-09-21 14:13:20 to 2026-09-21 15:13:20 UTC (sequences 1 to 12,345)",
        "Recorded:  fair_share on 4 agents (16 slots)",
        "Simulated: priority on 2 agents (16 slots)",
        "",
    ]
    mixed = workload({"default": "fair_share", "gpu": "priority"})
    assert cli.recorded_schedulers(mixed) == "pool default: fair_share, pool gpu: priority"
    assert cli.simulated_schedulers(mixed, Settings()) == cli.recorded_schedulers(mixed)


def test_the_table_has_a_row_per_job_beside_what_really_happened_then_the_total() -> None:
    assert cli.table_rows(a_report()) == [
        ["experiment/1", "alice", "2", "0:01:30", "0:00:30", "7,200", "7,200"],
        ["task/ab12", "bob", "1", "0:00:00", "1d 0:00:05", "3,600", "1,800"],
        ["Total", "", "3", "0:01:30", "1d 0:00:35", "10,800", "9,000"],
    ]
    assert len(cli.HEADERS) == len(cli.table_rows(a_report())[0])


def test_it_says_whether_the_recorded_assignments_were_made() -> None:
    assert cli.reproduction_line(a_report()) == (
        "The simulation made the 3 recorded assignments, in the recorded order, on the same agents and slots."
    )
    departed = a_report(
        1, "assignment 2: recorded allocation 2.1 on a slots [0], simulated allocation 2.1 on b slots [0]"
    )
    assert cli.reproduction_line(departed) == (
        "The simulation made the first 1 of 3 recorded assignments, then departs from the recording at"
        " assignment 2: recorded allocation 2.1 on a slots [0], simulated allocation 2.1 on b slots [0]."
    )


def test_json_gives_the_figures_in_seconds() -> None:
    said = cli.report_dict(workload(), Settings(scheduler="priority"), a_report(), as_recorded=False)
    assert said["recorded"] == {"schedulers": "fair_share", "agents": "4 agents (16 slots)"}
    assert said["simulated"]["schedulers"] == "priority"
    assert said["jobs"][0] == {
        "job_id": "experiment/1",
        "owner": "alice",
        "allocations": 2,
        "recorded": {"queue_s": 90.0, "slot_seconds": 7200.0},
        "simulated": {"queue_s": 30.0, "slot_seconds": 7200.0},
    }
    assert (said["reproduced"], said["difference"]) == (None, None)
    assert cli.report_dict(workload(), Settings(), a_report(), as_recorded=True)["reproduced"] == 3


def test_without_the_services_it_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "services.scheduler.simulate", None)
    with pytest.raises(CliError, match="needs determined-es's services installed"):
        cli.simulate(argparse.Namespace())


@pytest.mark.parametrize("flag", ["--agents", "--slots"])
def test_agents_and_slots_are_one_or_more(flag: str) -> None:
    parser = argparse.ArgumentParser()
    cli.add_simulate_parser(parser.add_subparsers())
    assert getattr(parser.parse_args(["simulate", flag, "3"]), flag[2:]) == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", flag, "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--min-run-s", "-1"])
