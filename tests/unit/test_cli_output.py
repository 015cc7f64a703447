"""What `det` prints: every metric point as CSV, a table or JSON; log lines;
why the master does not answer; no-change answers; and the context archive
it streams."""

import csv
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from determined.cli import _cluster_status as status
from determined.cli._metrics import write_json, write_rows
from determined.cli._output import format_log_time
from determined.cli.trial import LogTimes, log_lines
from determined.common.context import CHUNK_BYTES, context_files, pack_context
from determined.proto import api_pb2, events_pb2

AT = 1_700_000_000_123_456_789


def points() -> list[api_pb2.MetricPoint]:
    return [
        api_pb2.MetricPoint(
            group="training", steps_completed=1, metrics_json='{"loss": 0.5, "lr": 0.1}', reported_at_ns=AT
        ),
        api_pb2.MetricPoint(
            group="validation",
            steps_completed=1,
            metrics_json='{"loss": "NaN", "acc": 0.9, "cm": [[1, 0], [0, 1]]}',
            reported_at_ns=AT,
        ),
    ]


def test_csv_has_fixed_columns_then_one_per_metric_key() -> None:
    out = io.StringIO()
    write_rows(iter(points()), out, as_csv=True)
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    assert rows == [
        ["group", "steps_completed", "reported_at", "acc", "cm", "loss", "lr"],
        ["training", "1", "2023-11-14T22:13:20.123456Z", "", "", "0.5", "0.1"],
        ["validation", "1", "2023-11-14T22:13:20.123456Z", "0.9", "[[1, 0], [0, 1]]", "NaN", ""],
    ]


def test_the_table_aligns_the_same_columns() -> None:
    out = io.StringIO()
    write_rows(iter(points()), out, as_csv=False)
    header, rule, first, second = out.getvalue().splitlines()
    assert [c.strip() for c in header.split("|")] == [
        "Group",
        "# of Batches",
        "Report Time",
        "acc",
        "cm",
        "loss",
        "lr",
    ]
    assert len({line.index("|") for line in (header, first, second)}) == 1
    assert set(rule) <= {"-", "+"}
    assert [c.strip() for c in second.split("|")][3:] == ["0.9", "[[1, 0], [0, 1]]", "NaN", ""]


def test_json_is_one_array_streamed_point_by_point() -> None:
    out = io.StringIO()
    write_json(iter(points()), out)
    parsed = json.loads(out.getvalue())
    assert [(p["group"], p["metrics"]["loss"]) for p in parsed] == [("training", 0.5), ("validation", "NaN")]
    empty = io.StringIO()
    write_json(iter([]), empty)
    assert json.loads(empty.getvalue()) == []


def test_log_lines_show_time_allocation_and_line() -> None:
    entry = api_pb2.TrialLogsResponse(
        allocation_id="3.1",
        lines=[
            events_pb2.LogLine(timestamp_ns=AT, log="hello"),
            events_pb2.LogLine(timestamp_ns=AT + 10**9, log="bye"),
        ],
    )
    assert log_lines(entry) == (
        "[2023-11-14T22:13:20.123456Z] 3.1      || hello\n[2023-11-14T22:13:21.123456Z] 3.1      || bye\n"
    )


@pytest.mark.parametrize("ns", [0, 5, AT, 1_700_000_000_999_999_999, 1_700_000_001_000_000_000])
def test_log_times_match_format_log_time(ns: int) -> None:
    assert LogTimes()(ns) == format_log_time(ns)


def local(state: str = "running", **part: Any) -> status.LocalCluster:
    gateway = {"name": "gateway", "state": state, **part}
    parts = [gateway, {"name": "postgres", "state": "running"}]
    return status.LocalCluster({"supervisor_pid": 1, "parts": parts}, master_port=8080, supervisor_alive=True)


def test_which_part_is_down() -> None:
    reason = status.unreachable_reason
    assert reason("localhost:8080", local("backoff", restarts=1, last_error="exited with code 1")) == (
        "the gateway is down (restarting: 1 restart, last error: exited with code 1)"
    )
    assert reason("localhost:8080", local("stopped")) == "the gateway is down (stopped)"
    assert reason("localhost:8080", local()) == "the gateway is running but does not answer (yet?)"
    nats_down = local("starting")
    assert nats_down.status is not None
    nats_down.status["parts"].append({"name": "nats-server", "state": "backoff", "restarts": 2})
    assert reason("localhost:8080", nats_down) == (
        "the gateway is down (starting); also down: nats-server (restarting: 2 restarts)"
    )


def test_no_cluster_or_another_cluster() -> None:
    reason = status.unreachable_reason
    assert reason("localhost:8080", status.LocalCluster(None, None, False)) == (
        "no cluster is running (start one with: det deploy local cluster-up)"
    )
    gone = status.LocalCluster({"supervisor_pid": 1, "parts": []}, 8080, supervisor_alive=False)
    assert reason("localhost:8080", gone).startswith("no cluster is running: its supervisor has exited")
    assert reason("localhost:9090", local("backoff")).startswith("is a cluster running there?")
    assert reason("master.example:8080", None).startswith("is a cluster running there?")


def test_a_long_last_error_is_cut() -> None:
    text = status.unreachable_reason("localhost:8080", local("backoff", last_error="x" * 1000))
    assert len(text) < 400 and text.endswith("...)")


def test_the_archive_streams_in_bounded_chunks_and_stores_what_does_not_compress(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "train.py").write_text("import determined\n" * 10_000)
    (folder / "weights.bin").write_bytes(os.urandom(3 * CHUNK_BYTES))
    files = context_files(folder)
    chunks = list(files.archive_chunks(chunk_size=100_000))
    assert all(len(chunk) == 100_000 for chunk in chunks[:-1]) and 0 < len(chunks[-1]) <= 100_000
    archive = b"".join(chunks)
    assert archive == pack_context(folder)  # the same files, the same bytes
    assert len(archive) < files.content_size + 10_000  # random bytes stored, text deflated
    assert (files.file_count, files.content_size) == (2, 180_000 + 3 * CHUNK_BYTES)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        weights = tar.extractfile("weights.bin")
        assert weights is not None and weights.read() == (folder / "weights.bin").read_bytes()
