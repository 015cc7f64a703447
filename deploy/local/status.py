"""`<data dir>/run/status.json`: the supervisor's record of every part of a
local cluster, rewritten (atomically: a temporary file renamed over it)
whenever something changes, and at least every DISK_REFRESH_S:

    {"supervisor_pid": int, "updated_at": float unix seconds,
     "parts": [{"name", "state", "pid", "restarts", "last_error", "started_at", "disk_bytes"}]}

Read by `det deploy local status`, cluster-up, the gateway (GetMaster) and
the CLI (to say which part is down). `pid` is 0 and `started_at` is 0.0 when
there is none.

Beside it, each part that skipped an event it could not read or apply keeps
`<data dir>/run/<part>.events.json` (services/common/skips.py: the count and
the latest skipped sequences, subjects and reasons); the gateway rewrites its
own every few seconds with its projector's progress (applied sequence, the
log's last, caught up / behind / stuck). `event_notes` turns them into the
lines `det deploy local status` prints under its table.
"""

import json
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# The supervisor recomputes disk use this often (walking the data folders).
DISK_REFRESH_S = 10.0
# A part's report file ends so (services/common/skips.py: report_path_of).
EVENTS_REPORT_SUFFIX = ".events.json"
# The skipped sequences a status line names (the report keeps a few more).
NAMED_SKIPS = 5
# A projector report older than this is shown with its age (the gateway rewrites it every 5 s).
STALE_REPORT_S = 30.0


@dataclass(frozen=True)
class PartStatus:
    name: str
    state: str
    pid: int
    restarts: int
    last_error: str
    started_at: float
    disk_bytes: int


@dataclass(frozen=True)
class ClusterStatus:
    supervisor_pid: int
    updated_at: float
    parts: tuple[PartStatus, ...]

    def part(self, name: str) -> PartStatus:
        return next(part for part in self.parts if part.name == name)

    def to_json(self) -> dict[str, Any]:
        return {
            "supervisor_pid": self.supervisor_pid,
            "updated_at": self.updated_at,
            "parts": [asdict(part) for part in self.parts],
        }


def status_path(data_dir: Path) -> Path:
    return data_dir / "run" / "status.json"


def write_status(path: Path, status: ClusterStatus) -> None:
    write_atomically(path, json.dumps(status.to_json(), indent=2))


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old content or the new, never a part of it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    partial.replace(path)


def read_status(path: Path) -> ClusterStatus | None:
    """None when there is no status file (no supervisor ever ran there, or
    cluster-down removed it)."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    known = {f.name for f in fields(PartStatus)}
    parts = tuple(PartStatus(**{k: v for k, v in part.items() if k in known}) for part in document["parts"])
    return ClusterStatus(int(document["supervisor_pid"]), float(document["updated_at"]), parts)


def disk_bytes(paths: list[Path]) -> int:
    """Bytes the files under `paths` (files or folders) take; what vanishes
    while it is counted counts nothing."""
    total = 0
    for path in paths:
        try:
            if path.is_dir():
                total += sum(_size(Path(root) / name) for root, _, names in os.walk(path) for name in names)
            elif path.exists():
                total += _size(path)
        except OSError:
            continue
    return total


def _size(path: Path) -> int:
    try:
        return path.lstat().st_blocks * 512
    except OSError:
        return 0


def event_reports(data_dir: Path) -> dict[str, dict[str, Any]]:
    """Part name -> its report of skipped events and (the gateway's) projector
    progress, for the parts that wrote one."""
    reports: dict[str, dict[str, Any]] = {}
    for path in sorted((data_dir / "run").glob(f"*{EVENTS_REPORT_SUFFIX}")):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict):
            reports[path.name[: -len(EVENTS_REPORT_SUFFIX)]] = document
    return reports


def event_notes(reports: dict[str, dict[str, Any]], now: float | None = None) -> list[str]:
    """What the reports say, a line per fact: a projector that is behind or
    stuck, and the events each part skipped (count, latest sequences, why)."""
    now = time.time() if now is None else now
    lines = []
    for part, report in reports.items():
        projector = report.get("projector")
        if isinstance(projector, dict):
            lines.append(_projector_line(part, projector, now - float(report.get("updated_at", 0.0))))
        count = int(report.get("skipped_count", 0))
        latest = [entry for entry in report.get("skipped", []) if isinstance(entry, dict)][-NAMED_SKIPS:]
        if count and latest:
            sequences = ", ".join(str(entry.get("sequence")) for entry in latest)
            newest = latest[-1]
            lines.append(
                f"{part}: skipped {count} event(s) it could not read or apply; latest sequences {sequences}"
                f" ({newest.get('sequence')} on {newest.get('subject')}: {newest.get('reason')})"
            )
    return lines


def _projector_line(part: str, projector: dict[str, Any], age_s: float) -> str:
    state = projector.get("state", "unknown")
    applied, last = projector.get("applied", 0), projector.get("log_last", 0)
    line = f"{part}: read models {state}: applied sequence {applied} of the log's {last}"
    if state in ("behind", "stuck"):
        line += f" ({projector.get('behind', 0)} behind)"
    if age_s > STALE_REPORT_S:
        line += f" (as of {int(age_s)} s ago: the {part} has not reported since)"
    return line
