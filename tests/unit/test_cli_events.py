"""det events: its arguments become the gateway's filter, and each event one line."""

import json
import time

import pytest

from determined.cli.__main__ import build_parser
from determined.cli.events import event_filter, event_line, json_line, moment_ns, show_events
from determined.proto import api_pb2


def test_the_arguments_become_the_filter() -> None:
    args = build_parser().parse_args(
        ["-u", "admin", "events", "--trial", "7", "--user", "alice", "--type", "TrialCreated,trial_ended"]
        + ["--type", "AllocationExited", "--since", "2026-11-22T03:00:00Z", "--from-seq", "5", "--tail"]
    )
    assert (args.run, args.user, args.tail, args.limit, args.follow) == (show_events, "admin", True, 0, False)
    found = event_filter(args)
    assert (found.trial_id, found.experiment_id, found.user, found.from_sequence) == (7, 0, "alice", 5)
    assert list(found.types) == ["TrialCreated", "trial_ended", "AllocationExited"]
    assert found.since_ns == 1795316400 * 10**9 and found.until_ns == 0


def test_times_ago_and_bad_times() -> None:
    before = time.time_ns()
    assert before - 2 * 3600 * 10**9 - 10**9 < moment_ns("2h") <= time.time_ns() - 2 * 3600 * 10**9
    assert moment_ns("2026-11-22") == 1795305600 * 10**9
    with pytest.raises(SystemExit):
        build_parser().parse_args(["events", "--since", "yesterday"])


def test_one_line_per_event_with_its_reason_and_cause() -> None:
    event = api_pb2.LoggedEvent(
        sequence=812,
        occurred_at_ns=1795316400 * 10**9 + 123_456_789,
        aggregate="trial/7",
        type="trial_stop_requested",
        actor="service:searcher",
        summary="trial 7 to stop at rung 0",
        reason="cut at rung 0 (0.81 not in the top 1/4 of 8)",
        causation_id="validation-7-58",
        causation_sequence=800,
    )
    line = event_line(event)
    assert ".123" in line.split()[0]
    assert line.split()[1:5] == ["#812", "trial/7", "trial_stop_requested", "service:searcher"]
    assert line.endswith("trial 7 to stop at rung 0: cut at rung 0 (0.81 not in the top 1/4 of 8)  <- #800")
    event.causation_sequence = 0
    assert event_line(event).endswith("<- validation-7-58")
    assert json.loads(json_line(event))["causationId"] == "validation-7-58"
    unreadable = event_line(api_pb2.LoggedEvent(sequence=3, summary="unreadable event: no envelope"))
    assert "(unreadable)" in unreadable and unreadable.endswith("unreadable event: no envelope")
