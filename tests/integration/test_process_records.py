"""Process records and the kill that trusts them (services/common/processes.py),
with real processes: a group is killed while it is the recorded one, never a
process that got a recorded pid; a child armed by `allocation_preexec` records
itself and dies with its parent."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.processes import (
    ProcessRecord,
    ProcessRecordError,
    kill_recorded_process_group,
    process_alive,
    read_process_record,
    start_ticks,
    write_process_record,
)

DEADLINE_S = 10.0


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts in their own groups; whatever is left of them is killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def group(started: list[subprocess.Popen[bytes]], script: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """`sh -c script` in a group of its own; the pids it prints on its first line."""
    process = subprocess.Popen(["sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE)
    started.append(process)
    assert process.stdout is not None
    return process, [int(pid) for pid in process.stdout.readline().split()]


def record(path: Path, process: subprocess.Popen[bytes], ticks_off: int = 0) -> Path:
    ticks = start_ticks(process.pid)
    assert ticks is not None
    write_process_record(path, ProcessRecord("agent-1", "1.1", process.pid, process.pid, ticks + ticks_off))
    return path


def test_a_recorded_group_is_killed_whole(started: list[subprocess.Popen[bytes]], tmp_path: Path) -> None:
    leader, [child] = group(started, "sleep 300 & echo $!; wait")
    assert kill_recorded_process_group(record(tmp_path / "process.json", leader), grace_s=5)
    assert leader.wait(5) == -signal.SIGTERM
    until(lambda: not process_alive(child), "the child to die")
    assert not kill_recorded_process_group(tmp_path / "process.json")  # nothing left


def test_what_ignores_sigterm_gets_sigkill_after_the_grace(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    leader, _ = group(started, "trap '' TERM; echo; while :; do sleep 0.05; done")
    assert kill_recorded_process_group(record(tmp_path / "process.json", leader), grace_s=0.3)
    assert leader.wait(5) == -signal.SIGKILL


def test_a_group_whose_recorded_process_is_gone_is_still_killed(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    leader, [child] = group(started, "sleep 300 & echo $!")  # the shell exits; its child stays in the group
    path = record(tmp_path / "process.json", leader)
    assert leader.wait(5) == 0 and process_alive(child)
    assert kill_recorded_process_group(path)
    until(lambda: not process_alive(child), "the child to die")


def test_a_pid_that_is_another_process_now_is_never_killed(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    other, [child] = group(started, "sleep 300 & echo $!; wait")
    path = record(tmp_path / "process.json", other, ticks_off=-1)  # as if the recorded one had that pid
    assert not kill_recorded_process_group(path)
    assert other.poll() is None and process_alive(child)


def test_a_record_of_an_earlier_boot_names_nothing(
    started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    leader, _ = group(started, "echo; sleep 300")
    path = record(tmp_path / "process.json", leader)
    os.utime(path, (0, 0))
    assert not kill_recorded_process_group(path)
    assert leader.poll() is None


def test_no_record_or_no_process_kills_nothing(tmp_path: Path) -> None:
    assert not kill_recorded_process_group(tmp_path / "process.json")
    process = subprocess.Popen(["true"])
    process.wait()
    path = tmp_path / "process.json"
    write_process_record(path, ProcessRecord("agent-1", "1.1", process.pid, process.pid, 1))
    assert not kill_recorded_process_group(path)


@pytest.mark.parametrize(
    ("document", "error"),
    [
        ("not json", "not JSON"),
        ("[1]", "not a JSON object"),
        ('{"agent_id": "a", "allocation_id": "1.1", "pid": 5, "pgid": 5}', "start_ticks must be an integer"),
        (
            '{"agent_id": 1, "allocation_id": "1.1", "pid": 5, "pgid": 5, "start_ticks": 1}',
            "agent_id must be",
        ),
        (
            '{"agent_id": "a", "allocation_id": "1.1", "pid": true, "pgid": 5, "start_ticks": 1}',
            "pid must be",
        ),
        ('{"agent_id": "a", "allocation_id": "1.1", "pid": 0, "pgid": 5, "start_ticks": 1}', "positive"),
    ],
)
def test_a_bad_record_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, document: str, error: str
) -> None:
    path = tmp_path / "process.json"
    path.write_text(document)
    with pytest.raises(ProcessRecordError, match=error) as raised:
        kill_recorded_process_group(path)
    assert str(path) in str(raised.value)


# A parent that starts `sleep` as an allocation's process, prints its pid, and waits.
PARENT = """
import os, subprocess, sys, time
from pathlib import Path
from services.common.processes import allocation_preexec
preexec = allocation_preexec(os.getpid(), Path(sys.argv[1]), "agent-1", "1.1")
child = subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=preexec)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_an_allocations_process_records_itself_and_dies_with_its_parent(tmp_path: Path) -> None:
    path = tmp_path / "process.json"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(path)], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert read_process_record(path) == ProcessRecord(
            "agent-1", "1.1", child, child, start_ticks(child) or -1
        )
        assert json.loads(path.read_text()).keys() == {
            "agent_id",
            "allocation_id",
            "pid",
            "pgid",
            "start_ticks",
        }
        parent.kill()
        parent.wait()
        until(lambda: not process_alive(child), "the child to die with its parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
