"""`det agent | slot | job`, `det experiment set` and `det trial logs --rank`:
their arguments checked at parse time, their tables, and what they send and
print against a gateway that records the requests."""

import argparse
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from support.core_gateway import serving

from determined.cli.__main__ import build_parser, main
from determined.cli.agent import agent_row, slot_rows
from determined.cli.job import job_headers, job_row
from determined.cli.trial import log_lines
from determined.proto import api_pb2, api_pb2_grpc, events_pb2


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["job", "update", "7", "--priority", "0"],
            "0 is not a priority: priorities go from 1 (first) to 99",
        ),
        (["job", "update", "7", "--priority", "100"], "100 is not a priority"),
        (["job", "update", "7", "--weight", "0"], "0 is not a weight: a weight is a number above 0"),
        (["job", "update", "7", "--weight", "nan"], "nan is not a weight"),
        (["job", "update", "7", "--max-slots", "-1"], "-1 is not a slot cap: 0 or more, or none for no cap"),
        (["job", "update", "trial/7", "--priority", "3"], "'trial/7' is not a job id"),
        (["job", "update", "experiment/x", "--priority", "3"], "'x' is not an experiment id"),
        (["job", "update", "7"], "one of the arguments --priority --weight --max-slots is required"),
        (["job", "update", "7", "--priority", "3", "--weight", "2"], "not allowed with argument"),
        (["experiment", "set", "priority", "1", "high"], "'high' is not a priority (a whole number)"),
        (["experiment", "set", "max-slots", "0", "2"], "0 is not an experiment id"),
        (["trial", "logs", "1", "--rank", "-1"], "-1 is not a rank: ranks go from 0"),
    ],
)
def test_bad_values_are_refused_at_parse_time(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in refused(capsys, *argv)


def test_values_parse_to_what_the_api_takes() -> None:
    assert parse("job", "update", "7", "--weight", "2.5").job_id == "experiment/7"
    assert parse("job", "update", "experiment/7", "--max-slots", "none").max_slots == 0
    assert parse("experiment", "set", "max-slots", "3", "NONE").value == 0
    assert parse("experiment", "set", "weight", "3", "0.5").value == 0.5
    assert parse("trial", "logs", "4", "--rank", "2").rank_ids == [2]
    assert parse("agent", "disable", "a1", "--drain").drain is True
    assert parse("job", "list", "-p", "gpu").resource_pool == "gpu"


def agent(state: str = "ENABLED", **uses: tuple[str, int, int]) -> api_pb2.Agent:
    message = api_pb2.Agent(
        agent_id="agent-1",
        hostname="h",
        registered_at_ns=10**18,
        resource_pool="default",
        address="10.0.0.1",
        state=state,
        runtime="docker",
    )
    for slot_id in range(3):
        message.slots.add(slot_id=slot_id, type="cpu", device=f"cpu{slot_id}")
        allocation, trial, experiment = uses.get(f"s{slot_id}", ("", 0, 0))
        message.slot_uses.add(
            slot_id=slot_id, allocation_id=allocation, trial_id=trial, experiment_id=experiment
        )
    return message


def test_agent_and_slot_rows_say_what_runs_where() -> None:
    busy = agent(s0=("3.1", 3, 2), s1=("3.1", 3, 2))
    assert agent_row(busy) == [
        "agent-1", "h", "2001-09-09 01:46:40", 3, 1, "default", "ENABLED", "10.0.0.1", "docker"
    ]  # fmt: skip
    busy.runtime = ""  # registered before runtimes
    assert agent_row(busy)[-1] == "process"
    assert slot_rows(busy) == [
        ["agent-1", "default", 0, "RUNNING", "3.1", "trial 3 (experiment 2)", "cpu", "cpu0"],
        ["agent-1", "default", 1, "RUNNING", "3.1", "trial 3 (experiment 2)", "cpu", "cpu1"],
        ["agent-1", "default", 2, "FREE", "FREE", "", "cpu", "cpu2"],
    ]
    assert [row[3] for row in slot_rows(agent("LOST"))] == ["LOST"] * 3


def test_job_rows_show_priority_or_weight_as_the_pools_scheduler_uses() -> None:
    job = api_pb2.Job(
        job_id="experiment/7",
        type="EXPERIMENT",
        name="mnist",
        owner="ann",
        priority=10,
        weight=2.0,
        submitted_at_ns=10**18,
        slots_needed=4,
        slots_acquired=2,
        state="SCHEDULED",
        position=1,
        waiting_reason="its fair share is 2 slots and it holds 2",
    )
    assert job_headers("priority")[4] == "Priority" and job_headers("fair_share")[4] == "Weight"
    assert job_row(job, "priority") == [
        1,
        "experiment/7",
        "EXPERIMENT",
        "mnist",
        10,
        "2001-09-09 01:46:40",
        "2/4",
        "SCHEDULED",
        "ann",
        "its fair share is 2 slots and it holds 2",
    ]
    assert job_row(job, "fair_share")[4] == "2"


def test_log_lines_show_the_rank_that_wrote_them() -> None:
    entry = api_pb2.TrialLogsResponse(
        allocation_id="3.1",
        lines=[
            events_pb2.LogLine(timestamp_ns=10**18, log="hi", rank=1),
            events_pb2.LogLine(timestamp_ns=10**18, log="x"),
        ],
    )
    assert log_lines(entry) == (
        "[2001-09-09T01:46:40.000000Z] 3.1      || [rank=1] hi\n[2001-09-09T01:46:40.000000Z] 3.1      || x\n"
    )


class RecordingGateway(api_pb2_grpc.DeterminedServicer):
    def __init__(self) -> None:
        self.requests: list[Any] = []

    def UpdateJob(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        unchanged = (
            "Job experiment/7 has these values already: nothing to change" if request.priority == 5 else ""
        )
        return api_pb2.UpdateJobResponse(unchanged_reason=unchanged)

    def EnableAgent(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return api_pb2.EnableAgentResponse(unchanged_reason="Agent a1 is already enabled: nothing to do")

    def DisableAgent(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        return api_pb2.DisableAgentResponse()

    def GetJobs(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.requests.append(request)
        jobs = [
            api_pb2.Job(job_id="experiment/1", resource_pool="default", position=1, weight=1.0),
            api_pb2.Job(job_id="experiment/2", resource_pool="gpu", position=1, priority=3),
        ]
        return api_pb2.GetJobsResponse(jobs=jobs, schedulers={"default": "fair_share", "gpu": "priority"})


@pytest.fixture
def gateway() -> Iterator[tuple[str, RecordingGateway]]:
    servicer = RecordingGateway()
    with serving(servicer) as address:
        yield address, servicer


def test_commands_send_the_change_and_say_what_happened(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, servicer = gateway
    assert main(["-m", address, "experiment", "set", "max-slots", "7", "none"]) == 0
    assert main(["-m", address, "job", "update", "experiment/7", "--priority", "5"]) == 0
    assert main(["-m", address, "agent", "enable", "a1"]) == 0
    assert main(["-m", address, "agent", "disable", "a1", "--drain"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "Updated job experiment/7: max slots none (no cap)",
        "Job experiment/7 has these values already: nothing to change",
        "Agent a1 is already enabled: nothing to do",
        "Disabled agent a1; the work running there finishes (draining)",
    ]
    first, second, _, disable = servicer.requests
    assert (first.job_id, first.HasField("max_slots"), first.max_slots, first.HasField("priority")) == (
        "experiment/7",
        True,
        0,
        False,
    )
    assert (second.priority, disable.agent_id, disable.drain) == (5, "a1", True)


def test_job_list_shows_each_pool_with_its_scheduler(
    gateway: tuple[str, RecordingGateway], capsys: pytest.CaptureFixture[str]
) -> None:
    address, _ = gateway
    assert main(["-m", address, "job", "list"]) == 0
    out = capsys.readouterr().out
    assert "Resource pool default (fair share):" in out and "Resource pool gpu (priority):" in out
    assert "| Weight |" in out and "| Priority |" in out
