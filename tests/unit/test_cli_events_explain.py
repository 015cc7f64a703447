"""det events explain: its arguments, and each event of the tree one indented line."""

import pytest

from determined.cli.__main__ import build_parser
from determined.cli._events_explain import explain, explained_line
from determined.proto import api_pb2


def test_the_arguments_name_what_to_explain() -> None:
    args = build_parser().parse_args(["events", "explain", "allocation", "7.1", "--json"])
    assert (args.run, args.kind, args.id, args.json) == (explain, "allocation", "7.1", True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["events", "explain", "agent", "a"])


def test_an_event_is_indented_by_its_depth_with_its_reason() -> None:
    event = api_pb2.LoggedEvent(
        occurred_at_ns=1795316400 * 10**9,
        type="trial_stop_requested",
        actor="service:searcher",
        summary="trial 7 to stop at rung 0",
        reason="cut at rung 0 (58 batches): loss 0.81 not in the top 1/4 of 8",
    )
    line = explained_line(api_pb2.ExplainedEvent(event=event, depth=2))
    assert line.startswith("    ") and not line.startswith("     ")
    assert line.split()[1:3] == ["trial_stop_requested", "service:searcher"]
    assert line.endswith(
        "trial 7 to stop at rung 0 — cut at rung 0 (58 batches): loss 0.81 not in the top 1/4 of 8"
    )
    unreadable = api_pb2.LoggedEvent(summary="unreadable event: not protobuf")
    assert explained_line(api_pb2.ExplainedEvent(event=unreadable)).split()[0] == "(unreadable)"
