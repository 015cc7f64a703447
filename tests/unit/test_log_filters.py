"""Which log lines a TrialLogsRequest keeps (services/gateway/features/logs/filters.py)
and the flags of det trial logs that make the request (determined/cli/_log_filters.py)."""

import argparse

import pytest

from determined.cli._log_filters import add_log_filter_args, levels_at_or_above, log_request
from determined.proto import api_pb2, events_pb2
from services.gateway.features.logs import filters

LINES = [
    events_pb2.LogLine(timestamp_ns=10, stdtype="stdout", log="INFO: starting", rank=0),
    events_pb2.LogLine(timestamp_ns=20, stdtype="stderr", log="WARNING:slow", rank=1),
    events_pb2.LogLine(timestamp_ns=30, stdtype="stderr", log="determined agent: out of memory"),
    events_pb2.LogLine(timestamp_ns=40, stdtype="stdout", log="plain print"),
    events_pb2.LogLine(timestamp_ns=50, stdtype="stderr", log=" ERROR: failed", rank=0),
]
RESPONSE = api_pb2.TrialLogsResponse(trial_id=1, allocation_id="1.1", agent_id="a1", lines=LINES)


def logs_of(**fields: object) -> list[str]:
    request = api_pb2.TrialLogsRequest(trial_id=1, **fields)  # type: ignore[arg-type]
    kept = filters.kept(RESPONSE, filters.line_filter(request))
    return [line.log for line in kept.lines] if kept is not None else []


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("INFO: x", "INFO"),
        ("WARNING:x", "WARNING"),
        (" CRITICAL: x", "CRITICAL"),
        ("TRACE: x", "TRACE"),
        ("info: x", ""),
        ("x INFO: y", ""),
        ("INFO x", ""),
        ("", ""),
    ],
)
def test_a_line_s_level_is_the_one_it_starts_with(text: str, level: str) -> None:
    assert filters.level_of(text) == level


def test_no_filter_keeps_the_response_itself() -> None:
    assert filters.kept(RESPONSE, filters.line_filter(api_pb2.TrialLogsRequest(trial_id=1))) is RESPONSE


@pytest.mark.parametrize(
    ("fields", "kept"),
    [
        ({"levels": ["WARNING", "ERROR", "CRITICAL"]}, ["WARNING:slow", " ERROR: failed"]),
        ({"levels": ["LOG_LEVEL_INFO"]}, ["INFO: starting"]),
        ({"stdtypes": ["stdout"]}, ["INFO: starting", "plain print"]),
        ({"sources": ["agent"]}, ["determined agent: out of memory"]),
        (
            {"sources": ["container", "master"]},
            ["INFO: starting", "WARNING:slow", "plain print", " ERROR: failed"],
        ),
        ({"rank_ids": [1]}, ["WARNING:slow"]),
        ({"rank": 0, "rank_ids": [1]}, ["INFO: starting", "WARNING:slow", " ERROR: failed"]),
        (
            {"timestamp_after_ns": 20, "timestamp_before_ns": 50},
            ["determined agent: out of memory", "plain print"],
        ),
        ({"search_text": "print"}, ["plain print"]),
        ({"stdtypes": ["stderr"], "rank_ids": [0]}, [" ERROR: failed"]),
        ({"agent_ids": ["a2"]}, []),
        ({"agent_ids": ["a1", "a2"], "container_ids": ["1.1"], "search_text": "slow"}, ["WARNING:slow"]),
        ({"container_ids": ["1.2"]}, []),
        ({"levels": ["DEBUG"]}, []),
    ],
)
def test_each_filter_keeps_the_lines_matching_one_of_its_values(
    fields: dict[str, object], kept: list[str]
) -> None:
    assert logs_of(**fields) == kept


@pytest.mark.parametrize(
    ("fields", "refused"),
    [
        ({"levels": ["LOUD"]}, "level 'LOUD' is not one of"),
        ({"stdtypes": ["stdin"]}, "stdtype 'stdin'"),
        ({"sources": ["gateway"]}, "source 'gateway'"),
        ({"agent_ids": ["a"] * 101}, "agent_ids: at most 100"),
        ({"search_text": "x" * 1001}, "search_text: at most 1000"),
        ({"limit": -1}, "limit"),
    ],
)
def test_a_filter_that_is_not_one_is_refused(fields: dict[str, object], refused: str) -> None:
    with pytest.raises(ValueError, match=refused):
        filters.line_filter(api_pb2.TrialLogsRequest(trial_id=1, **fields))  # type: ignore[arg-type]


def response(allocation: str, *logs: str) -> api_pb2.TrialLogsResponse:
    return api_pb2.TrialLogsResponse(
        trial_id=1, allocation_id=allocation, lines=[events_pb2.LogLine(log=log) for log in logs]
    )


@pytest.mark.parametrize(
    ("count", "kept"),
    [
        (1, [("1.2", ["e"])]),
        (2, [("1.2", ["d", "e"])]),
        (3, [("1.1", ["c"]), ("1.2", ["d", "e"])]),
        (5, [("1.1", ["a", "b", "c"]), ("1.2", ["d", "e"])]),
        (9, [("1.1", ["a", "b", "c"]), ("1.2", ["d", "e"])]),
    ],
)
def test_the_last_lines_are_taken_from_the_last_responses(
    count: int, kept: list[tuple[str, list[str]]]
) -> None:
    last = filters.last_lines([response("1.1", "a", "b", "c"), response("1.2", "d", "e")], count)
    assert [(r.allocation_id, [line.log for line in r.lines]) for r in last] == kept


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_log_filter_args(parser)
    return parser.parse_args(list(argv))


def test_the_flags_make_the_request_0_38_s_flags_ask_for() -> None:
    args = parsed(
        "--tail", "20", "-f", "--agent-id", "a1", "--agent-id", "a2", "--container-id", "1.1",
        "--rank-id", "0", "--rank", "2", "--level", "warning", "--stdtype", "stderr",
        "--source", "agent", "--timestamp-after", "2026-11-22T03:00:00Z", "--timestamp-before", "2026-11-23",
    )  # fmt: skip
    request = log_request(args, 7)
    assert request == api_pb2.TrialLogsRequest(
        trial_id=7,
        follow=True,
        limit=20,
        tail=True,
        agent_ids=["a1", "a2"],
        container_ids=["1.1"],
        rank_ids=[0, 2],
        levels=["WARNING", "ERROR", "CRITICAL"],
        stdtypes=["stderr"],
        sources=["agent"],
        timestamp_after_ns=1795316400 * 10**9,
        timestamp_before_ns=1795392000 * 10**9,
    )


def test_head_and_no_flags() -> None:
    assert log_request(parsed("--head", "5"), 1) == api_pb2.TrialLogsRequest(trial_id=1, limit=5)
    assert log_request(parsed(), 1) == api_pb2.TrialLogsRequest(trial_id=1)
    assert levels_at_or_above(None) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--head", "1", "--tail", "1"],
        ["--head", "0"],
        ["--tail", "x"],
        ["--level", "LOUD"],
        ["--rank-id", "-1"],
    ],
)
def test_bad_flags_are_refused_at_parse_time(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parsed(*argv)
