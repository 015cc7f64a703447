"""The events a process skipped because it could not read or fold them.

Every reader of the log skips an event that is not well-formed
(wellformed.py), and a shell skips one its pure core cannot fold or answer
(an exception from evolve or decide): each is logged once, as
`event_skipped` with its sequence, subject and why, counted, and the reader
goes on with what follows. A part never stops for an event; what the log
holds stays there for an operator to look at (`python -m services.eventlog
--from-sequence N`).

A part with a report file (`report_path`: `<data dir>/run/<part>.events.json`
on a local cluster, beside its ready file) keeps its record there: the count
and the latest REPORTED skips, rewritten at each skip, and read back at start,
so a restarted part still names what it skipped before. `det deploy local
status` shows it; the gateway adds how far its projector is behind the log.
"""

import collections
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

# The latest skips a record keeps (its count counts them all).
REPORTED = 20

log = structlog.get_logger()


@dataclass(frozen=True)
class SkippedEvent:
    sequence: int
    subject: str
    reason: str
    # Who skipped it: "log" for an event no reader can read, else the core or projector.
    reader: str
    skipped_at: float


class Skips:
    """One process's record of skipped events (one per EventStore)."""

    def __init__(self, report_path: Path | None = None, *, quiet: bool = False) -> None:
        self.count = 0
        # Quiet: counted, not logged (a helper whose caller logs them: the replay helper).
        self.quiet = quiet
        self.latest: collections.deque[SkippedEvent] = collections.deque(maxlen=REPORTED)
        self._seen: set[tuple[int, str]] = set()
        # Reader -> the newest sequence it skipped: what an earlier run recorded
        # (loaded; a restarted part replays it) and this run's.
        self._known_through: dict[str, int] = {}
        self._through: dict[str, int] = {}
        self.report_path = report_path
        # Called with the report after each skip (the gateway rewrites its file with more).
        self.extra: Callable[[], dict[str, Any]] | None = None
        if report_path is not None:
            self._load(report_path)

    def record(self, sequence: int, subject: str, reason: str, reader: str = "log") -> None:
        """Logs and counts a skipped event, once per sequence and reader: not
        again when a restarted part replays what an earlier run recorded."""
        if (sequence, reader) in self._seen or sequence <= self._known_through.get(reader, 0):
            return
        self._seen.add((sequence, reader))
        self._through[reader] = max(sequence, self._through.get(reader, 0))
        self.count += 1
        self.latest.append(SkippedEvent(sequence, subject, reason, reader, time.time()))
        if not self.quiet:
            log.warning("event_skipped", sequence=sequence, subject=subject, reason=reason, reader=reader)
        self.write_report()

    def sequences(self) -> list[int]:
        return [skipped.sequence for skipped in self.latest]

    def report(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "pid": os.getpid(),
            "updated_at": time.time(),
            "skipped_count": self.count,
            "skipped": [asdict(skipped) for skipped in self.latest],
            "known_through": {
                reader: max(through, self._through.get(reader, 0))
                for reader, through in {**self._through, **self._known_through}.items()
            },
        }
        if self.extra is not None:
            document.update(self.extra())
        return document

    def write_report(self) -> None:
        """Rewrites the report file (atomically), if there is one; best effort."""
        if self.report_path is None:
            return
        partial = self.report_path.with_name(f".{self.report_path.name}.{os.getpid()}.tmp")
        try:
            self.report_path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps(self.report(), indent=2))
            partial.replace(self.report_path)
        except OSError as error:
            log.warning("skip_report_not_written", path=str(self.report_path), error=str(error))

    def _load(self, path: Path) -> None:
        """Continues the record an earlier run of the part left (nothing if unreadable)."""
        try:
            document = json.loads(path.read_text())
            self.count = int(document["skipped_count"])
            for entry in document["skipped"]:
                self.latest.append(SkippedEvent(**entry))
            self._known_through = {str(k): int(v) for k, v in document.get("known_through", {}).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.count = 0
            self.latest.clear()
            self._known_through = {}


def report_path_of(ready_file: Path | None) -> Path | None:
    """A part's report file: beside its ready file (`<name>.ready` -> `<name>.events.json`)."""
    return None if ready_file is None else ready_file.with_name(f"{ready_file.stem}.events.json")


def read_report(path: Path) -> dict[str, Any] | None:
    """A part's report, None when it has none (or it cannot be read)."""
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
