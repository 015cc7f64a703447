"""Processes: whether a pid names a live process, and the records the agent
keeps of the process groups it starts. Shared by the agent (trials forked by
its fork server are not its children) and `det deploy local` (services
started by an earlier CLI run; `cluster-down` kills what the agent recorded).

A process record (`<agent work dir>/<allocation id>/process.json`) names an
allocation's process group: `{"agent_id", "allocation_id", "pid", "pgid",
"start_ticks"}`, where `start_ticks` is field 22 of /proc/<pid>/stat (when
the process started, in clock ticks since boot). The process writes it itself
(`record_own_process`, after it has its own session and before it runs
anything), so a record exists for every group that ever ran. A group is
killed only while it is still the one recorded (`recorded_group_members`):
pids are reused (pid_max is often 32768), and a record outlives its process.
"""

import contextlib
import ctypes
import functools
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PROCESS_RECORD = "process.json"
# prctl(2): the signal the kernel sends a process when its parent (the thread
# that forked it) dies. Kept across exec, except into set-uid programs.
PR_SET_PDEATHSIG = 1
KILL_GRACE_S = 3.0
_POLL_S = 0.05


class ProcessRecordError(ValueError):
    """A process record that cannot be read as one: names the file and what is wrong."""


@dataclass(frozen=True)
class ProcessRecord:
    agent_id: str
    allocation_id: str
    pid: int
    pgid: int
    start_ticks: int


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A child that exited but was not reaped is a zombie: not alive.
    stat = _stat(pid)
    return stat is not None and stat.state != "Z"


def start_ticks(pid: int) -> int | None:
    """When the process started (field 22 of /proc/<pid>/stat); None: no such process."""
    stat = _stat(pid)
    return None if stat is None else stat.start_ticks


# -- records ------------------------------------------------------------------------


def write_process_record(path: Path, record: ProcessRecord) -> None:
    """Writes the record atomically (a reader sees all of it or nothing)."""
    staging = path.with_name(f".{path.name}.{os.getpid()}")
    staging.write_text(json.dumps(asdict(record)) + "\n")
    os.replace(staging, path)


def read_process_record(path: Path) -> ProcessRecord:
    """FileNotFoundError: there is none; ProcessRecordError: it is not a record."""
    text = path.read_text()
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ProcessRecordError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ProcessRecordError(f"{path}: not a JSON object")
    fields = {"agent_id": str, "allocation_id": str, "pid": int, "pgid": int, "start_ticks": int}
    for name, kind in fields.items():
        value = document.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ProcessRecordError(f"{path}: {name} must be {'a string' if kind is str else 'an integer'}")
    if document["pid"] <= 0 or document["pgid"] <= 0:
        raise ProcessRecordError(f"{path}: pid and pgid must be positive")
    return ProcessRecord(**{name: document[name] for name in fields})


def record_own_process(path: Path, agent_id: str, allocation_id: str) -> None:
    """Run by the new process itself, once it leads its own session: records it."""
    pid = os.getpid()
    ticks = start_ticks(pid)
    if ticks is None:
        raise OSError(f"cannot read /proc/{pid}/stat")
    write_process_record(path, ProcessRecord(agent_id, allocation_id, pid, os.getpgid(0), ticks))


def allocation_preexec(
    parent_pid: int, record: Path, agent_id: str, allocation_id: str, become: Callable[[], None] | None = None
) -> Callable[[], None]:
    """`preexec_fn` for an allocation's process (started with its own
    session): it records itself (as the caller's user), runs `become` (which
    may change its user: the trial's), then dies with the agent (armed after
    any change of user, which would clear it) before it execs."""
    die = dying_with_parent(parent_pid)

    def preexec() -> None:
        record_own_process(record, agent_id, allocation_id)
        if become is not None:
            become()
        die()

    return preexec


def dying_with_parent(parent_pid: int) -> Callable[[], None]:
    """A function for a new child to run (a `preexec_fn`): the kernel SIGKILLs
    it when `parent_pid` dies, and it exits at once if that already happened.
    The C function is looked up here, in the parent, not after the fork.

    The parent must start the child from a thread that lives as long as it
    does: the signal follows the forking thread, not the process."""
    prctl = _prctl()

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os._exit(1)

    return arm


@functools.cache
def _prctl() -> Any:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


# -- killing a recorded group -------------------------------------------------------


def recorded_group_members(
    record: ProcessRecord, written_at: float | None = None, owner_uid: int | None = None
) -> list[int]:
    """The live processes of the recorded group, if it is still the recorded
    one; else []. (The recorded process leads its session: it cannot leave
    the group.)

    It is while the recorded pid runs with the recorded start_ticks. When
    that process is gone, the group's number stays taken while any member
    lives (the kernel does not hand out a pid that is still a process group's
    id), so members found under it are the recorded group's: unless the
    number was given to a new process since, which is why a member that
    started before the recorded one rules the group out, and a record written
    before the machine's last boot (`written_at`, unix seconds) names nothing.
    The one case left is a new group leader that got the number after every
    process of ours was gone and died leaving members: it needs the number to
    come around again in that window.

    `owner_uid`: the user who wrote the record (the file's owner), when it is
    neither root nor us: a group with a process of another user is not its
    own (a trial could write a record naming a service's group), so nothing."""
    if written_at is not None and written_at < _boot_time():
        return []
    leader = _stat(record.pid)
    if leader is not None and leader.start_ticks != record.start_ticks:
        return []  # the pid is someone else's now
    members = [stat for stat in _all_stats() if stat.pgrp == record.pgid and stat.state != "Z"]
    if leader is None and any(stat.start_ticks < record.start_ticks for stat in members):
        return []
    if owner_uid is not None and any(_real_uid(stat.pid) not in (owner_uid, None) for stat in members):
        return []
    return [stat.pid for stat in members]


def kill_recorded_process_group(record_path: Path, grace_s: float = KILL_GRACE_S) -> bool:
    """Kills the process group a record names, if it is still the recorded
    one and anything of it runs: SIGTERM, then SIGKILL to what is left after
    `grace_s`. Returns whether it signalled anything. No record: False;
    ProcessRecordError: the file is not a record."""
    try:
        record = read_process_record(record_path)
        written = record_path.stat()
    except FileNotFoundError:
        return False
    # A record written by root or by us is ours; one another user wrote names only that user's processes.
    owner = None if written.st_uid in (0, os.geteuid()) else written.st_uid
    if not _signal_recorded(record, signal.SIGTERM, written.st_mtime, owner):
        return False
    if not _gone(record, grace_s):
        _signal_recorded(record, signal.SIGKILL, owner_uid=owner)
        _gone(record, grace_s)
    return True


def _signal_recorded(
    record: ProcessRecord, signum: int, written_at: float | None = None, owner_uid: int | None = None
) -> bool:
    """Signals the recorded group if it still is; returns whether it did."""
    if not recorded_group_members(record, written_at, owner_uid):
        return False
    try:
        os.killpg(record.pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _gone(record: ProcessRecord, timeout_s: float) -> bool:
    """Waits up to timeout_s for the recorded group to have no live process."""
    deadline = time.monotonic() + timeout_s
    while recorded_group_members(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


# -- /proc --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stat:
    pid: int
    state: str
    pgrp: int
    start_ticks: int


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may hold anything: split after the last ")".
    fields = text[text.rindex(")") + 2 :].split()
    return _Stat(pid, fields[0], int(fields[2]), int(fields[19]))


def _real_uid(pid: int) -> int | None:
    """The process's real user id (/proc/<pid>/status); None: it is gone."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None


def _all_stats() -> list[_Stat]:
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                stats.append(stat)
    return stats


def _boot_time() -> float:
    with contextlib.suppress(OSError), open("/proc/stat") as file:
        for line in file:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0
