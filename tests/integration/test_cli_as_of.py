"""`--at-seq S | --at TIME` on det experiment describe and list-trials, det
agent list and det job list, against a module-wide gateway over the golden
three_experiments log stored as recorded: as of the log's end each prints a
first line naming the point, then exactly what the live command prints; as of
an earlier point, what was then. The CLI runs in a thread: the gateway serves
from this test's event loop."""

import asyncio
import re
from datetime import UTC, datetime

import pytest
from support import module_gateway
from support.golden_log import golden_log, stored_as_recorded
from support.security_gateway import PASSWORD

from determined.cli.__main__ import main
from determined.cli._output import format_time
from services.common.eventstore import EventStore
from services.gateway.features.events.as_of_point import first_event
from services.gateway.server import Gateway

module_namespace = module_gateway.module_namespace
gateway = module_gateway.gateway
store = module_gateway.store

LOG = "three_experiments.jsonl"
# A line the gateway logs (structlog's console form).
GATEWAY_LOG = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[\w+ *\] ")


@pytest.fixture(scope="module")
async def first(gateway: Gateway, store: EventStore) -> int:
    """The sequence of the recorded log's first event, once the gateway has projected it all
    (the gateway's own users come before; each login of the CLI appends after)."""
    first = await store.last_sequence() + 1
    await stored_as_recorded(store, golden_log(LOG))
    assert await gateway.projector.wait_for(await store.last_sequence(), timeout_s=60)
    return first


@pytest.fixture
def address(gateway: Gateway, first: int) -> str:
    return f"127.0.0.1:{gateway.port}"


@pytest.fixture(autouse=True)
def admin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_USER", "admin")
    monkeypatch.setenv("DET_PASS", PASSWORD)


async def det(capsys: pytest.CaptureFixture[str], address: str, *argv: str) -> str:
    """What the command printed (without the in-process gateway's log lines)."""
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["-m", address, *argv]) == 0
    return "".join(line for line in capsys.readouterr().out.splitlines(True) if not GATEWAY_LOG.match(line))


@pytest.mark.parametrize(
    "command",
    [
        ["experiment", "describe", "1"],
        ["experiment", "describe", "2"],
        ["experiment", "list-trials", "2"],
        ["agent", "list"],
        ["slot", "list"],
    ],
)
async def test_as_of_the_end_of_the_log_prints_what_the_live_command_prints(
    capsys: pytest.CaptureFixture[str], address: str, store: EventStore, command: list[str]
) -> None:
    last = await store.last_sequence()
    live = await det(capsys, address, *command)
    as_of = await det(capsys, address, *command, "--at-seq", str(last))
    assert as_of == f"As of sequence {last} ({format_time(await _time_of(store, last))})\n" + live


async def test_as_of_an_earlier_point_prints_the_cluster_as_it_was(
    capsys: pytest.CaptureFixture[str], address: str, store: EventStore, first: int
) -> None:
    log = golden_log(LOG)
    running = first + 5  # experiment 1's trial runs on the agent
    at = log[5].occurred_at_ns
    described = await det(capsys, address, "experiment", "describe", "1", "--at-seq", str(running))
    assert described.splitlines()[0] == f"As of sequence {running} ({format_time(at)})"
    assert "ACTIVE" in described.splitlines()[3] and "COMPLETED" not in described
    iso = datetime.fromtimestamp(at // 1000 / 1e6, UTC).isoformat()  # to the microsecond: event 6 is after
    jobs = await det(capsys, address, "job", "list", "--at", iso)
    lines = jobs.splitlines()
    assert lines[0] == f"As of sequence {running - 1} ({format_time(at)})"
    assert "experiment/1" in lines[3] and "mnist-const" in lines[3] and "SCHEDULED" in lines[3]
    assert "experiment/2" not in jobs
    agents = await det(capsys, address, "slot", "list", "--at-seq", str(running))
    assert "1.1" in agents
    assert await det(capsys, address, "job", "list", "--at-seq", str(first - 1)) == (
        f"As of sequence {first - 1} ({format_time(await _time_of(store, first - 1))})\n"
        "No jobs are queued or running\n"
    )


async def _time_of(store: EventStore, sequence: int) -> int:
    stored = await first_event(store, sequence)
    assert stored is not None
    return stored.envelope.occurred_at_ns
