"""What `det deploy local status` says of the parts' reports of skipped events and
of the gateway's projector (deploy/local/status.py, services/common/skips.py)."""

from pathlib import Path

from deploy.local.status import event_notes, event_reports
from services.common.skips import Skips, report_path_of


def test_each_skip_report_is_named_with_its_latest_sequences(tmp_path: Path) -> None:
    skips = Skips(report_path_of(tmp_path / "run" / "scheduler.ready"))
    for sequence in range(1, 8):
        skips.record(sequence, f"det.events.allocation.{sequence}", "not an event envelope")
    (tmp_path / "run" / "agent-1.events.json").write_text("not json")  # a damaged report is left out
    reports = event_reports(tmp_path)
    assert list(reports) == ["scheduler"]
    assert event_notes(reports) == [
        (
            "scheduler: skipped 7 event(s) it could not read or apply; latest sequences 3, 4, 5, 6, 7"
            " (7 on det.events.allocation.7: not an event envelope)"
        )
    ]


def test_the_projector_is_said_caught_up_behind_or_stuck_and_a_stale_report_is_aged() -> None:
    def report(state: str, behind: int, updated_at: float) -> dict[str, object]:
        progress = {"applied": 100 - behind, "log_last": 100, "behind": behind, "state": state}
        return {"updated_at": updated_at, "skipped_count": 0, "skipped": [], "projector": progress}

    now = 1000.0
    assert event_notes({"gateway": report("caught up", 0, now)}, now) == [
        "gateway: read models caught up: applied sequence 100 of the log's 100"
    ]
    assert event_notes({"gateway": report("stuck", 7, now - 1)}, now) == [
        "gateway: read models stuck: applied sequence 93 of the log's 100 (7 behind)"
    ]
    [stale] = event_notes({"gateway": report("behind", 2, now - 120)}, now)
    assert stale.endswith("(2 behind) (as of 120 s ago: the gateway has not reported since)")
