"""The agent's work dir on disk: one folder per allocation (see `folders.py`
for what becomes of them). Blocking file-system calls: the runner runs them
in a thread."""

import json
import shutil
from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from services.agent.folders import AllocationFolder, StartUpPlan, folders_to_remove, plan_start_up
from services.common.processes import (
    PROCESS_RECORD,
    ProcessRecordError,
    kill_recorded_process_group,
    read_process_record,
)

EXIT_NOTE = "exit.json"

log = structlog.get_logger()


def record_path(folder: Path) -> Path:
    return folder / PROCESS_RECORD


def note_bad_exit(
    folder: Path, agent_id: str, exit_code: int, *, killed: bool, error: str, now: float
) -> None:
    """Notes that the allocation ended badly: its folder is kept from `now` on."""
    note = {
        "agent_id": agent_id,
        "allocation_id": folder.name,
        "exit_code": exit_code,
        "killed": killed,
        "error": error,
        "ended_at": now,
    }
    staging = folder / f".{EXIT_NOTE}.tmp"
    staging.write_text(json.dumps(note) + "\n")
    staging.replace(folder / EXIT_NOTE)


def remove_folder(folder: Path) -> None:
    """Removes the folder; what cannot be removed is logged and left."""

    def failed(_function: object, path: str, error: tuple[type, BaseException, object]) -> None:
        log.warning("allocation_folder_not_removed", path=path, error=str(error[1]))

    shutil.rmtree(folder, onerror=failed)


def read_folders(work_dir: Path) -> list[AllocationFolder]:
    if not work_dir.is_dir():
        return []
    return [_read_folder(path) for path in sorted(work_dir.iterdir()) if path.is_dir()]


def recover(
    work_dir: Path, agent_id: str, *, now: float, keep_failed_s: float, keep: Collection[str] = ()
) -> StartUpPlan:
    """Before this run of the agent starts anything: kills what earlier runs
    left running, notes their folders as ended, sweeps the old ones (but those in `keep`)."""
    plan = plan_start_up(agent_id, read_folders(work_dir), now=now, keep_failed_s=keep_failed_s, keep=keep)
    killed = kill_groups(work_dir, plan.kill)
    if killed:
        log.warning("leftover_process_groups_killed", allocation_ids=killed)
    for allocation_id in plan.lost:
        note_bad_exit(work_dir / allocation_id, agent_id, -1, killed=False, error="agent restarted", now=now)
    for allocation_id in plan.remove:
        remove_folder(work_dir / allocation_id)
    if plan.kill or plan.remove:
        log.info("work_dir_recovered", killed=len(plan.kill), lost=len(plan.lost), removed=len(plan.remove))
    return plan


def sweep(work_dir: Path, agent_id: str, *, running: set[str], now: float, keep_failed_s: float) -> list[str]:
    """Removes the folders of allocations that ended badly long enough ago."""
    folders = read_folders(work_dir)
    removed = folders_to_remove(agent_id, folders, running=running, now=now, keep_failed_s=keep_failed_s)
    for allocation_id in removed:
        remove_folder(work_dir / allocation_id)
    if removed:
        log.info("failed_allocation_folders_removed", allocation_ids=list(removed))
    return list(removed)


def kill_groups(work_dir: Path, allocation_ids: Sequence[str]) -> list[str]:
    """Kills the recorded process groups of these allocations, all at once
    (each has its grace period); returns those that had something to kill."""
    if not allocation_ids:
        return []
    with ThreadPoolExecutor(max_workers=min(len(allocation_ids), 16)) as pool:
        results = list(pool.map(lambda allocation_id: _kill_group(work_dir / allocation_id), allocation_ids))
    return [allocation_id for allocation_id, killed in zip(allocation_ids, results, strict=True) if killed]


def _kill_group(folder: Path) -> bool:
    try:
        return kill_recorded_process_group(record_path(folder))
    except (ProcessRecordError, OSError) as error:
        log.warning("process_group_not_killed", allocation_id=folder.name, error=str(error))
        return False


def _read_folder(folder: Path) -> AllocationFolder:
    agent_id: str | None = None
    recorded = False
    try:
        record = read_process_record(record_path(folder))
    except (OSError, ProcessRecordError):
        pass  # none (the process never started), or a file of the trial's own
    else:
        if record.allocation_id == folder.name:
            agent_id, recorded = record.agent_id, True
    failed_at = None
    try:
        note = json.loads((folder / EXIT_NOTE).read_text())
        if note["allocation_id"] == folder.name:
            agent_id, failed_at = str(note["agent_id"]), float(note["ended_at"])
    except (OSError, ValueError, TypeError, KeyError):
        pass
    return AllocationFolder(folder.name, agent_id, recorded, failed_at)
