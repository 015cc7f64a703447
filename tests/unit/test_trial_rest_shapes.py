"""The pure parts of Determined's REST shapes for trials, logs and checkpoints: a log line as
its `det trial logs` prints it, the TrialLogs parameters, the trial's workloads and a
checkpoint's .tar.gz (tests/compat drives them with Determined's own client)."""

import asyncio
import gzip
import io
import json
import tarfile
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from starlette.requests import Request

from determined.proto import api_pb2, events_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.http import shapes, trial_log_params, workloads
from services.gateway.http.checkpoint_archive import tar_gz

# 2023-11-14T22:13:20Z and 1.5 µs.
NS = 1_700_000_000 * 10**9 + 1_500


def request(**params: str | list[str]) -> Request:
    query = urlencode(params, doseq=True).encode()
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": query, "headers": []})


def response(allocation_id: str = "4.1", *lines: events_pb2.LogLine) -> api_pb2.TrialLogsResponse:
    return api_pb2.TrialLogsResponse(trial_id=4, allocation_id=allocation_id, agent_id="agent-1", lines=lines)


def test_a_log_line_is_shown_as_determined_prints_it() -> None:
    line = events_pb2.LogLine(timestamp_ns=NS, stdtype="stderr", log="WARNING: slow", rank=2)
    shown = shapes.log_line(response("4.1", line), line)
    assert shown["message"] == "[2023-11-14T22:13:20.000001Z] 4.1 [rank=2] || WARNING: slow\n"
    assert (shown["level"], shown["log"], shown["rankId"], shown["containerId"]) == (
        "LOG_LEVEL_WARNING",
        "WARNING: slow",
        2,
        "4.1",
    )
    plain = events_pb2.LogLine(timestamp_ns=NS, stdtype="stdout", log="determined agent: started")
    shown = shapes.log_line(response("123456789.10", plain), plain)
    assert shown["message"] == "[2023-11-14T22:13:20.000001Z] 12345678 || determined agent: started\n"
    assert (shown["level"], shown["source"], shown["rankId"]) == ("LOG_LEVEL_UNSPECIFIED", "agent", None)
    assert shapes.log_line(response("", plain), plain)["message"].startswith(
        "[2023-11-14T22:13:20.000001Z]          ||"
    )


def test_determined_log_parameters_become_the_request() -> None:
    asked, newest_first = trial_log_params.trial_logs_request(
        request(
            limit="5",
            orderBy="ORDER_BY_DESC",
            levels=["LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"],
            rankIds=["0", "1"],
            agentIds="a,b",
            timestampAfter="2023-11-14T22:13:20Z",
            searchText="loss",
        ),
        4,
    )
    assert newest_first and (asked.trial_id, asked.limit, asked.tail, asked.follow) == (4, 5, True, False)
    assert (list(asked.levels), list(asked.rank_ids), list(asked.agent_ids)) == (
        ["LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"],
        [0, 1],
        ["a", "b"],
    )
    assert (asked.timestamp_after_ns, asked.search_text) == (1_700_000_000 * 10**9, "loss")
    following, newest_first = trial_log_params.trial_logs_request(request(follow="true"), 4)
    assert following.follow and not following.tail and not newest_first


@pytest.mark.parametrize(
    "params, named",
    [
        ({"orderBy": "ORDER_BY_DESC"}, "orderBy"),
        ({"orderBy": "ORDER_BY_DESC", "limit": "5", "follow": "true"}, "orderBy"),
        ({"orderBy": "ORDER_BY_DESC", "limit": "100001"}, "orderBy"),
        ({"rankIds": "x"}, "rankIds"),
        ({"rankIds": "-1"}, "rankIds"),
        ({"levels": "LOG_LEVEL_LOUD"}, "level"),
        ({"stdtypes": "stdin"}, "stdtype"),
        ({"enableRegex": "true"}, "enableRegex"),
        ({"timestampBefore": "yesterday"}, "timestampBefore"),
        ({"agentIds": ",".join(map(str, range(101)))}, "agent_ids"),
    ],
)
def test_a_parameter_that_is_not_one_is_refused(params: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        trial_log_params.trial_logs_request(request(**params), 4)


def test_newest_first_turns_the_lines_around() -> None:
    lines = [events_pb2.LogLine(log=str(n)) for n in range(5)]

    async def answers() -> AsyncIterator[api_pb2.TrialLogsResponse]:
        yield response("4.1", *lines[:2])
        yield response("4.2", *lines[2:])

    async def turned() -> list[tuple[str, str]]:
        return [
            (r.allocation_id, line.log)
            async for r in trial_log_params.newest_first(answers())
            for line in r.lines
        ]

    assert asyncio.run(turned()) == [("4.2", "4"), ("4.2", "3"), ("4.2", "2"), ("4.1", "1"), ("4.1", "0")]


def point(group: str, steps: int, reported: int, **metrics: float) -> api_pb2.MetricPoint:
    return api_pb2.MetricPoint(
        group=group, steps_completed=steps, reported_at_ns=reported, metrics_json=json.dumps(metrics)
    )


def test_workloads_are_ordered_as_determined_orders_them() -> None:
    points = [
        point("validation", 2, 5, loss=0.1),
        point("training", 2, 4, loss=0.5),
        point("training", 1, 1, loss=0.9),
    ]
    checkpoints = [api_pb2.Checkpoint(uuid="c", steps_completed=2, reported_at_ns=6, state="DELETING")]

    def kinds(shown: list[dict[str, dict[str, int]]]) -> list[tuple[str, int]]:
        return [(name, w["totalBatches"]) for item in shown for name, w in item.items()]

    by_batches = workloads.workloads(points, checkpoints)
    assert kinds(by_batches) == [("training", 1), ("training", 2), ("validation", 2), ("checkpoint", 2)]
    assert by_batches[-1]["checkpoint"]["state"] == "STATE_COMPLETED"  # Determined has no DELETING
    assert (
        kinds(workloads.workloads(points, checkpoints, "batches", descending=True)) == kinds(by_batches)[::-1]
    )
    by_loss = workloads.workloads(points, checkpoints, "loss", descending=True)
    assert kinds(by_loss) == [("training", 1), ("training", 2), ("validation", 2), ("checkpoint", 2)]
    assert kinds(workloads.workloads(points, checkpoints, "loss")) == [
        ("validation", 2),
        ("training", 2),
        ("training", 1),
        ("checkpoint", 2),
    ]
    assert workloads.kinds_of("FILTER_OPTION_VALIDATION") == {"validation"}
    with pytest.raises(InvalidArgumentError, match="filter"):
        workloads.kinds_of("FILTER_OPTION_EVERYTHING")


def test_a_checkpoint_without_its_experiment_config_names_its_storage() -> None:
    checkpoint = api_pb2.Checkpoint(
        uuid="c", trial_id=1, experiment_id=1, storage_json='{"type": "shared_fs"}'
    )
    assert shapes.checkpoint(checkpoint)["training"]["experimentConfig"] == {
        "checkpoint_storage": {"type": "shared_fs"}
    }
    config = {"checkpoint_storage": {"type": "s3"}, "searcher": {"metric": "loss"}}
    assert shapes.checkpoint(checkpoint, config)["training"]["experimentConfig"] == config


def archive(files: dict[str, bytes], resources: dict[str, int]) -> bytes:
    checkpoint = api_pb2.Checkpoint(uuid="c", resources=resources, reported_at_ns=NS)

    async def download(
        asked: api_pb2.DownloadCheckpointFileRequest,
    ) -> AsyncIterator[api_pb2.DownloadCheckpointFileResponse]:
        data = files[asked.path]
        for start in range(0, len(data), 3):
            yield api_pb2.DownloadCheckpointFileResponse(data=data[start : start + 3], size=len(data))

    async def streamed() -> bytes:
        return b"".join([chunk async for chunk in tar_gz(checkpoint, download)])

    return asyncio.run(streamed())


def test_a_checkpoint_is_archived_as_a_tar_gz() -> None:
    files = {"weights.bin": b"\x00\x01" * 700, "sub/notes.txt": b"hello", "empty": b""}
    resources = {name: len(data) for name, data in files.items()} | {"sub/": 0}
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive(files, resources)))) as tar:
        members = {member.name: member for member in tar.getmembers()}
        assert sorted(members) == ["empty", "sub", "sub/notes.txt", "weights.bin"]
        assert members["sub"].isdir() and members["weights.bin"].mtime == 1_700_000_000
        for name, data in files.items():
            extracted = tar.extractfile(members[name])
            assert extracted is not None and extracted.read() == data


def test_an_archive_whose_file_changed_size_ends_in_an_error() -> None:
    with pytest.raises(OSError, match="holds 5 bytes, not 9"):
        archive({"a": b"hello"}, {"a": 9})
