"""Bundles (det events export, det deploy local replay): the export's lines are the lines
`python -m services.eventlog` prints, every recorded log reads back as a bundle, and a bad line
is named before anything starts."""

import gzip
import json
from pathlib import Path

import pytest
from support.golden_log import GOLDEN, golden_log

from deploy.local import replay_home
from deploy.local.cluster import ClusterOptions, ClusterRecord, DeployError
from deploy.local.replay import replay_up
from deploy.local.replay_bundle import BundleError, Event, Header, Unreadable, check_bundle, read_bundle
from determined.cli._events_export import bundle_line, header_line
from determined.common.limits import MAX_EVENT_BYTES
from determined.proto import api_pb2
from services.common.eventlog import StoredEvent
from services.eventlog.__main__ import envelope_line
from services.gateway.features.events.wording import logged_event

RECORDED = sorted(path.name for path in GOLDEN.glob("*.jsonl"))
EVENT = {
    "event_id": "agent-registered-vm",
    "aggregate": "agent/vm",
    "occurred_at_ns": "1795438740618568765",
    "actor": "service:agent",
    "agent_registered": {"agent_id": "vm", "hostname": "vm"},
}


def write_lines(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("name", RECORDED)
def test_an_export_line_is_the_line_the_eventlog_tool_prints(name: str) -> None:
    for sequence, envelope in enumerate(golden_log(name), start=1):
        stored = StoredEvent(sequence, envelope, caught_up=False)
        assert bundle_line(logged_event(stored)) == envelope_line(stored)


def test_an_unreadable_event_is_exported_as_one() -> None:
    line = json.loads(bundle_line(api_pb2.LoggedEvent(sequence=4, summary="unreadable event: DecodeError")))
    assert line == {"sequence": 4, "unreadable": "unreadable event: DecodeError"}


@pytest.mark.parametrize("name", RECORDED)
def test_every_recorded_log_reads_back_as_a_bundle(name: str) -> None:
    lines = list(read_bundle(GOLDEN / name))
    assert [line.envelope for line in lines if isinstance(line, Event)] == golden_log(name)
    assert check_bundle(GOLDEN / name).events == len(lines)


def test_a_header_and_unreadable_events_are_read_and_a_gzipped_bundle_too(tmp_path: Path) -> None:
    header = header_line(api_pb2.EventFilter(experiment_id=3), "cluster-7", 0.0)
    assert json.loads(header) == {
        "determined_es_bundle": 1,
        "exported_at": "1970-01-01T00:00:00Z",
        "filter": {"experiment_id": "3"},
        "cluster_id": "cluster-7",
    }
    text = "\n".join([header, json.dumps({"sequence": 2, **EVENT}), '{"sequence": 5, "unreadable": "x"}', ""])
    path = tmp_path / "bundle.jsonl.gz"
    path.write_bytes(gzip.compress(text.encode()))
    header_read, event, unreadable = read_bundle(path)
    assert isinstance(header_read, Header) and header_read.fields["cluster_id"] == "cluster-7"
    assert isinstance(event, Event) and (event.sequence, event.envelope.aggregate) == (2, "agent/vm")
    assert unreadable == Unreadable(5, "x")
    summary = check_bundle(path)
    assert (summary.events, summary.unreadable, summary.header["filter"]) == (1, [5], {"experiment_id": "3"})


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("not json", "line 2: not JSON"),
        ("[1, 2]", "line 2: not a JSON object"),
        (json.dumps(EVENT), 'line 2: no "sequence"'),
        (json.dumps({"sequence": 1, **EVENT}), "line 2: sequence 1 after 1: the events must be in log order"),
        (json.dumps({"sequence": 2, **EVENT, "agent_lost": {}}), "line 2: not an event envelope"),
        (json.dumps({"sequence": 2, **EVENT, "no_such_event": {}}), "line 2: not an event envelope"),
        (json.dumps({"sequence": 2, **EVENT, "aggregate": "agent/other"}), "line 2: agent_registered on "),
        (
            json.dumps({"sequence": 2, **EVENT, "event_id": ""}),
            "line 2: agent_registered without an event id",
        ),
        (json.dumps({"determined_es_bundle": 1}), "line 2: a bundle's header can only be its first line"),
        ("x" * (MAX_EVENT_BYTES + 1), f"line 2: over {MAX_EVENT_BYTES} bytes, the limit of one event"),
    ],
)
def test_a_bad_line_is_named_with_what_is_wrong(tmp_path: Path, line: str, why: str) -> None:
    path = write_lines(tmp_path / "bundle.jsonl", {"sequence": 1, **EVENT}, line, {"sequence": 9, **EVENT})
    with pytest.raises(BundleError, match=f"bundle.jsonl, {why}"):
        check_bundle(path)


def test_a_bundle_of_a_newer_format_or_of_no_event_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="line 1: bundle format 2: this version reads format 1"):
        check_bundle(write_lines(tmp_path / "newer.jsonl", {"determined_es_bundle": 2}))
    with pytest.raises(BundleError, match="holds no event to replay"):
        check_bundle(write_lines(tmp_path / "empty.jsonl", '{"sequence": 1, "unreadable": "x"}'))
    with pytest.raises(BundleError, match="cannot read"):
        check_bundle(tmp_path / "missing.jsonl")


def test_a_replay_runs_the_servers_and_the_gateway_only(tmp_path: Path) -> None:
    record = ClusterRecord.of(ClusterOptions(tmp_path, replay="bundle.jsonl"))
    assert record.part_names() == ("nats-server", "postgres", "gateway")
    assert record.agent_specs() == []
    record.save(tmp_path)
    loaded = ClusterRecord.load(tmp_path)
    assert loaded is not None and loaded.options(tmp_path).replay == "bundle.jsonl"


def test_a_bad_bundle_starts_nothing_and_a_replay_folder_keeps_its_bundle(tmp_path: Path) -> None:
    bad = write_lines(tmp_path / "bad.jsonl", {"sequence": 1, **EVENT}, "{")
    with pytest.raises(DeployError, match="bad.jsonl, line 2: not JSON .*; nothing was started"):
        replay_up(bad, tmp_path / "data", 18080)
    assert not (tmp_path / "data").exists()
    with pytest.raises(DeployError, match="holds no replay: name the bundle"):
        replay_up(None, tmp_path / "data", 18080)
    kept = tmp_path / "kept"
    info = replay_home.ReplayInfo("one.jsonl", "bundle.jsonl", "0" * 64, 1, "password")
    replay_home.keep(kept, info)
    with pytest.raises(DeployError, match="holds the replay of another bundle \\(one.jsonl\\)"):
        replay_up(GOLDEN / RECORDED[0], kept, 18080)
    with pytest.raises(DeployError, match="holds the replay of one.jsonl, which only starts as a replay"):
        replay_home.refuse_cluster_up(kept)
    assert (kept / "replay" / "replay.json").stat().st_mode & 0o777 == 0o600
    assert replay_home.gateway_environment(kept)["DET_REPLAY_OF"] == "one.jsonl"
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    (cluster / "cluster.secret").write_text(json.dumps({"cluster_id": "c", "secret": "s"}))
    with pytest.raises(DeployError, match="holds a cluster's data, not a replay's"):
        replay_up(GOLDEN / RECORDED[0], cluster, 18080)
