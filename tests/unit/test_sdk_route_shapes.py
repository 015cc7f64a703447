"""The shapes of the REST routes Determined 0.38.1's SDK and `det master logs` read
(services/gateway/http/sdk_routes.py), without a cluster: the keys its bindings require,
its SDK's metrics key per group asked, and `offset`/`limit` over the master's lines."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.requests import Request

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.http.sdk_routes import (
    MAX_METRICS_TRIALS,
    asked_trial_ids,
    log_entries,
    log_entry,
    metrics_report,
)

POINT = api_pb2.MetricPoint(
    group="validation", steps_completed=3, metrics_json='{"loss": 0.25}', reported_at_ns=10**18
)


def query(text: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/", "query_string": text.encode(), "headers": []}
    )


@pytest.mark.parametrize(("asked", "key"), [("validation", "validation_metrics"), ("", "avg_metrics")])
def test_a_metrics_report_has_what_its_sdk_reads_for_the_group_asked(asked: str, key: str) -> None:
    report = metrics_report(7, POINT, asked)
    required = {"archived", "endTime", "group", "id", "metrics", "totalBatches", "trialId", "trialRunId"}
    assert required <= report.keys()
    assert report["metrics"] == {key: {"loss": 0.25}}
    assert (report["trialId"], report["totalBatches"], report["group"]) == (7, 3, "validation")
    assert report["endTime"] == "2001-09-09T01:46:40Z"


def test_a_master_log_line_is_a_log_entry() -> None:
    entry = api_pb2.MasterLogEntry(id=4, timestamp_ns=10**18, level="WARNING", message="slow")
    assert log_entry(entry) == {
        "id": 4,
        "timestamp": "2001-09-09T01:46:40.000000Z",
        "level": "LOG_LEVEL_WARNING",
        "message": "slow",
    }
    assert log_entry(api_pb2.MasterLogEntry(id=5))["level"] == "LOG_LEVEL_UNSPECIFIED"


@pytest.mark.parametrize(
    ("skip", "limit", "ids"), [(0, 0, [1, 2, 3, 4, 5]), (2, 0, [3, 4, 5]), (1, 2, [2, 3]), (0, 1, [1])]
)
def test_master_lines_are_skipped_and_limited(skip: int, limit: int, ids: list[int]) -> None:
    async def pages() -> AsyncIterator[api_pb2.MasterLogsResponse]:
        yield api_pb2.MasterLogsResponse(entries=[api_pb2.MasterLogEntry(id=i) for i in (1, 2, 3)])
        yield api_pb2.MasterLogsResponse(entries=[api_pb2.MasterLogEntry(id=i) for i in (4, 5)])

    async def shown() -> list[int]:
        return [result["logEntry"]["id"] async for result in log_entries(pages(), skip=skip, limit=limit)]

    assert asyncio.run(shown()) == ids


def test_trial_ids_are_numbers_within_the_limit() -> None:
    assert asked_trial_ids(query("trialIds=3&trialIds=4,5")) == [3, 4, 5]
    with pytest.raises(InvalidArgumentError, match="numbers"):
        asked_trial_ids(query("trialIds=x"))
    with pytest.raises(InvalidArgumentError, match="at most"):
        asked_trial_ids(query("trialIds=" + ",".join(["1"] * (MAX_METRICS_TRIALS + 1))))
