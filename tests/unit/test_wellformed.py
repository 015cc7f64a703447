"""The one check of whether an event can be read (services/common/wellformed.py):
every reader of the log and every append uses it."""

import pytest
from support.golden_log import golden_log

from determined.common.limits import MAX_EVENT_BYTES
from determined.proto import events_pb2
from services.common.envelope import SUBJECT_KINDS, Append, Envelope, subject_for, wrap
from services.common.skips import Skips, read_report, report_path_of
from services.common.wellformed import (
    AGGREGATE_ID,
    MalformedEventError,
    decoded,
    problem,
)

GOLDEN = (
    "three_experiments.jsonl",
    "adaptive_pause_kill.jsonl",
    "must_fail_changed_stop.jsonl",
    "pause_withdrawn.jsonl",
)


def envelope(aggregate: str, payload: object, event_id: str = "e-1") -> Envelope:
    return wrap(Append(aggregate, payload, event_id), actor="test", occurred_at_ns=1)  # type: ignore[arg-type]


def stored(aggregate: str, payload: object) -> tuple[bytes, str]:
    return envelope(aggregate, payload).SerializeToString(), subject_for("det", aggregate)


def test_every_event_type_has_its_aggregate_id() -> None:
    assert set(AGGREGATE_ID) == set(SUBJECT_KINDS)


@pytest.mark.parametrize("name", GOLDEN)
def test_every_recorded_event_is_well_formed(name: str) -> None:
    for event in golden_log(name):
        assert problem(event) is None, event


def test_a_well_formed_event_decodes_on_its_subject() -> None:
    data, subject = stored("allocation/12.1", events_pb2.AllocationStarted(allocation_id="12.1"))
    assert decoded(data, subject).allocation_started.allocation_id == "12.1"
    assert decoded(data).aggregate == "allocation/12.1"  # the subject unknown: not compared


def test_job_resources_name_their_job_whole() -> None:
    assert problem(envelope("experiment/7", events_pb2.JobResourcesChanged(job_id="experiment/7"))) is None
    assert (
        problem(envelope("experiment/7", events_pb2.JobResourcesChanged(job_id="experiment/8"))) is not None
    )
    assert problem(envelope("experiment/7", events_pb2.JobResourcesChanged(job_id="7"))) is not None


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xff\xff", "not an event envelope"),
        (b"{}", "not an event envelope"),
        (b"\x0a\x05ab", "not an event envelope"),  # a truncated field
        (b"", "no payload of a known event type"),
        (Envelope(event_id="x", aggregate="allocation/1").SerializeToString(), "no payload"),
        # field 999 of the envelope: a type this code does not know
        (b"\xba\x3e\x00" + Envelope(event_id="x").SerializeToString(), "no payload of a known event type"),
    ],
)
def test_bytes_that_are_no_event_are_refused_with_a_reason(data: bytes, why: str) -> None:
    with pytest.raises(MalformedEventError, match=why):
        decoded(data, "det.events.allocation.1")


def test_a_huge_payload_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(MalformedEventError, match="over the limit"):
        decoded(b"\x00" * (MAX_EVENT_BYTES + 1))


def test_deeply_nested_bytes_are_refused() -> None:
    nested = b""
    for _ in range(2000):  # a nested group of the envelope's first message field, far past protobuf's depth
        nested = b"\x3a" + _varint(len(nested)) + nested
    with pytest.raises(MalformedEventError):
        decoded(nested)


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (
            envelope("experiment/3", events_pb2.AllocationExited(allocation_id="3")),
            "kind must be 'allocation'",
        ),
        (envelope("allocation/3.1", events_pb2.ExperimentKillRequested(experiment_id=3)), "kind must be"),
        (envelope("allocation/1.1", events_pb2.AllocationExited(allocation_id="2.1")), "names 2.1 id"),
        (envelope("allocation/1.1", events_pb2.AllocationExited()), "names no id"),
        (envelope("trial/0", events_pb2.TrialEnded(trial_id=0)), "names no id"),
        (envelope("allocation", events_pb2.AllocationExited(allocation_id="")), "not a valid aggregate id"),
        (envelope("allocation/", events_pb2.AllocationExited()), "not a valid aggregate id"),
        (envelope("allocation/a.*", events_pb2.AllocationExited(allocation_id="a.*")), "not a valid"),
        (envelope("allocation/a..b", events_pb2.AllocationExited(allocation_id="a..b")), "not a valid"),
        (envelope("allocation/a b", events_pb2.AllocationExited(allocation_id="a b")), "not a valid"),
        (
            envelope("allocation/1.1", events_pb2.AllocationExited(allocation_id="1.1"), event_id=""),
            "event id",
        ),
        (envelope("allocation/1.1", events_pb2.AllocationExited(allocation_id="1.1"), "x" * 600), "event id"),
    ],
)
def test_an_event_about_another_aggregate_than_it_claims_is_refused(event: Envelope, why: str) -> None:
    assert why in (problem(event) or "")
    with pytest.raises(MalformedEventError, match=why.replace("*", r"\*")):
        decoded(event.SerializeToString())


def test_an_event_stored_on_another_subject_than_its_aggregate_is_refused() -> None:
    # What a part that may publish on allocation subjects would do to kill an experiment.
    kill = envelope("experiment/3", events_pb2.ExperimentKillRequested(experiment_id=3)).SerializeToString()
    with pytest.raises(MalformedEventError, match="another subject"):
        decoded(kill, "det.events.allocation.3")
    with pytest.raises(MalformedEventError, match="another subject"):
        decoded(kill, "test.events.experiment.3", namespace="det")
    assert (
        decoded(kill, "test.events.experiment.3", namespace="test").experiment_kill_requested.experiment_id
        == 3
    )


def test_skips_are_logged_once_counted_and_reported(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = report_path_of(tmp_path / "run" / "searcher.ready")
    assert path == tmp_path / "run" / "searcher.events.json"
    skips = Skips(path)
    skips.record(5, "det.events.allocation.x", "not an event envelope")
    skips.record(5, "det.events.allocation.x", "not an event envelope")  # a second reader of the same event
    skips.record(5, "det.events.allocation.x", "SearcherCore cannot fold it", reader="SearcherCore")
    skips.record(9, "det.events.trial.1", "no payload")
    assert (skips.count, skips.sequences()) == (3, [5, 5, 9])
    report = read_report(path)
    assert report is not None and report["skipped_count"] == 3
    assert [entry["sequence"] for entry in report["skipped"]] == [5, 5, 9]
    again = Skips(path)  # a restarted part goes on with the record, replaying what it knows
    for sequence in (5, 9):
        again.record(sequence, "det.events.allocation.x", "not an event envelope")
    again.record(12, "det.events.trial.2", "no payload")
    again.record(5, "det.events.allocation.x", "SearcherCore cannot fold it", reader="SearcherCore")
    assert (again.count, again.sequences()) == (4, [5, 5, 9, 12])
    assert read_report(path)["known_through"] == {"log": 12, "SearcherCore": 5}  # type: ignore[index]


def test_an_unreadable_report_starts_a_new_record(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "gateway.events.json"
    path.write_text("{not json")
    assert Skips(path).count == 0


def _varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out += bytes([low | 0x80])
        else:
            return out + bytes([low])
