"""Reports that cannot be stored fail alone, and outages are waited out: checks at the call,
refused batches split so that the good reports land, deterministic failures never retried,
reports buffered (bounded) while the gateway answers UNAVAILABLE. Against the in-process
gateway of `core_gateway`."""

import logging
import math
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env, wait_for

import determined as det
from determined import _client
from determined._client import MetricRecord, Outage, failure_kind, part_reporter
from determined.core import _metrics, _validate
from determined.core._errors import ReportError, ReportTooLargeError, UnserializableValueError

LIMIT = _validate.MAX_REPORT_BYTES


@pytest.fixture
def on_cluster(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    set_trial_env(monkeypatch, gateway.port, config)
    yield tmp_path
    det.get_cluster_info.cache_clear()


def steps(fake: FakeGateway) -> list[int]:
    return [step for _, step, _ in fake.reports()]


# -- at the call ----------------------------------------------------------------------------------


@pytest.mark.parametrize("on", ["cluster", "off"])
def test_an_oversized_report_is_refused_at_the_call_naming_the_key_and_the_limit(
    fake: FakeGateway, on_cluster: pathlib.Path, on: str
) -> None:
    with det.core.init() as core_context:
        train = det.core.DummyTrainContext() if on == "off" else core_context.train
        with pytest.raises(ReportTooLargeError) as refused:
            train.report_training_metrics(5, {"loss": 0.5, "blob": "x" * (10 * 2**20)})
        train.report_training_metrics(6, {"loss": 0.25})
    message = str(refused.value)
    assert "the training report at steps_completed=5 is 10 MiB as JSON" in message
    assert "at most 1 MiB" in message and "metrics['blob'], 10 MiB" in message
    assert isinstance(refused.value, ValueError)
    assert steps(fake) == ([] if on == "off" else [6])  # nothing of the refused report was queued


def test_a_report_is_measured_whole() -> None:
    train = det.core.DummyTrainContext()
    many = {f"m{i}": "y" * 1000 for i in range(1100)}
    with pytest.raises(
        ReportTooLargeError, match=r"custom report at steps_completed=1 is 1.1 MiB .*1002 bytes"
    ):
        train.report_metrics("custom", 1, many)
    train.report_metrics("custom", 1, {"m": "y" * (LIMIT - 10)})  # {"m":"..."}: just under the limit


def test_a_value_with_no_json_form_is_a_value_error_naming_the_key() -> None:
    train = det.core.DummyTrainContext()
    loop: list[Any] = []
    loop.append(loop)
    for metrics, key in [({"loss": 1.0, "model": object()}, "model"), ({"ok": 1, "loop": loop}, "loop")]:
        with pytest.raises(UnserializableValueError, match=rf"metrics\['{key}'\]") as refused:
            train.report_training_metrics(1, metrics)
        assert isinstance(refused.value, ValueError) and isinstance(refused.value, TypeError)
    # What Determined converts still passes: NaN and infinities as strings, tolist() objects.
    copy = _validate.check_metrics({"a": math.nan, "b": -math.inf})
    assert _validate.metrics_json(copy, "training", 1) == '{"a":"NaN","b":"-Infinity"}'


def test_metadata_over_the_limit_or_not_json_is_refused_at_the_call(
    fake: FakeGateway, on_cluster: pathlib.Path
) -> None:
    with det.core.init() as core_context:
        with pytest.raises(ReportTooLargeError, match=r"the trial's metadata is 2 MiB.*metadata\['notes'\]"):
            core_context.train.set_metadata({"notes": "n" * 2 * 2**20})
        with pytest.raises(UnserializableValueError, match=r"metadata\['lr'\] is not"):
            core_context.train.set_metadata({"phase": "train", "lr": math.nan})
        too_large = {"steps_completed": 1, "blob": "b" * 2 * 2**20}
        with (
            pytest.raises(
                ReportTooLargeError, match=r"the checkpoint's metadata is 2 MiB.*metadata\['blob'\]"
            ),
            core_context.checkpoint.store_path(too_large),
        ):
            pytest.fail("the block must not run")
        metadata: dict[str, Any] = {"steps_completed": 2}
        with (
            pytest.raises(UnserializableValueError, match=r"metadata\['model'\]"),
            core_context.checkpoint.store_path(metadata) as (path, _),
        ):
            metadata["model"] = object()  # changed inside the block: checked again at its end
    assert fake.metadata_sets == [] and fake.checkpoints == []
    assert not path.exists()  # the half-written checkpoint is removed


# -- refused batches ------------------------------------------------------------------------------


def test_a_refused_batch_is_split_so_the_good_reports_land_once(
    fake: FakeGateway, on_cluster: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.max_batch_bytes = 100 * 1024  # the gateway stores less than the harness accepts
    fake.down = True  # holds the first batch, so that the others queue up into one batch
    with det.core.init() as core_context, caplog.at_level(logging.ERROR, logger="determined.core"):
        train = core_context.train
        train.report_training_metrics(0, {"loss": 0.0})
        wait_for(lambda: fake.metric_calls > 0)
        for step in range(1, 10):
            train.report_training_metrics(
                step, {"loss": float(step), "text": "t" * (200 * 1024 if step == 6 else 10)}
            )
        fake.down = False
        wait_for(lambda: "dropped" in caplog.text)  # logged at once, not at exit
        with pytest.raises(ReportError, match=r"the training report at steps_completed=6 .* was refused"):
            train.report_training_metrics(10, {"loss": 10.0})
    assert steps(fake) == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10]
    split = [reporter for seq, reporter in fake.batches if seq == min(s for s, _ in fake.batches) + 1]
    # Steps 1-9 went as one batch: halves 1-4 and 5-9 (refused), 5-6 (refused) and 7-9, then 5 and 6.
    assert sorted(split) == sorted(part_reporter(_client.REPORTER_ID, path) for path in ("0", "100", "11"))
    assert "too large for the event log" in caplog.text


def test_a_dropped_report_does_not_keep_a_checkpoint_from_being_reported(
    fake: FakeGateway, on_cluster: pathlib.Path
) -> None:
    fake.max_batch_bytes = 100 * 1024
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"text": "t" * 200 * 1024})
        with (
            pytest.raises(ReportError, match="steps_completed=1 .* dropped"),
            core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id),
        ):
            (path / "weights").write_text("w")
    assert [c.uuid for c in fake.checkpoints] == [storage_id]


def test_the_parts_of_a_split_batch_have_ids_of_their_own() -> None:
    assert part_reporter("abc", "") == "abc"
    assert len({part_reporter("abc", path) for path in ("", "0", "1", "01", "10")}) == 5


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("UNAVAILABLE", "transient"),
        ("DEADLINE_EXCEEDED", "transient"),
        ("CANCELLED", "transient"),
        ("INVALID_ARGUMENT", "refused"),
        ("RESOURCE_EXHAUSTED", "refused"),
        ("FAILED_PRECONDITION", "final"),
        ("PERMISSION_DENIED", "final"),
        ("NOT_FOUND", "final"),
        ("UNAUTHENTICATED", "final"),
        ("UNKNOWN", "final"),
    ],
)
def test_what_a_failure_means(code: str, kind: str) -> None:
    assert failure_kind(code) == kind


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.NOT_FOUND,
    ],
)
def test_a_deterministic_failure_is_never_retried(
    fake: FakeGateway, on_cluster: pathlib.Path, code: grpc.StatusCode
) -> None:
    with det.core.init() as core_context:
        fake.fail_with = code
        with pytest.raises(grpc.RpcError):
            core_context.train.report_progress(0.5)
        assert fake.calls == 1
        core_context.train.report_training_metrics(1, {"loss": 1.0})
        wait_for(lambda: fake.metric_calls == 1)
        with pytest.raises(Exception, match="no such trial"):
            core_context._metrics.flush()  # type: ignore[union-attr]
        fake.fail_with = None
    assert fake.metric_calls == 1 and fake.calls == 2


# -- outages --------------------------------------------------------------------------------------


def test_reports_wait_out_an_outage_in_order_once_with_one_log_line(
    fake: FakeGateway, on_cluster: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with det.core.init() as core_context, caplog.at_level(logging.WARNING, logger="determined.core"):
        core_context.train.report_training_metrics(0, {"loss": 0.0})
        core_context._metrics.flush()  # type: ignore[union-attr]
        fake.down = True
        for step in range(1, 300):  # the training loop goes on while the gateway is down
            core_context.train.report_training_metrics(step, {"loss": float(step)})
        retried = fake.metric_calls
        wait_for(lambda: fake.metric_calls >= retried + 3)  # retried a few times meanwhile
        threading.Timer(0.2, lambda: setattr(fake, "down", False)).start()
        with core_context.checkpoint.store_path({"steps_completed": 299}) as (path, _):
            (path / "weights").write_text("w")
        core_context.train.set_status("done")
    assert steps(fake) == list(range(300))
    assert len(fake.checkpoints) == 1 and [s.status for s in fake.statuses] == ["done"]
    outage = [r.getMessage() for r in caplog.records if "the gateway" in r.getMessage()]
    assert outage == [
        "reports: waiting for the gateway (UNAVAILABLE: the event log (nats-server) is unavailable; retrying)",
        outage[1],
    ]
    assert outage[1].startswith("reports: the gateway answers again after ")


def test_a_full_buffer_blocks_the_caller_until_the_gateway_answers() -> None:
    answering = threading.Event()
    sent: list[int] = []

    def send(batch_seq: int, part: str, records: list[MetricRecord]) -> None:
        answering.wait()
        sent.extend(record.steps_completed for record in records)

    shipper = _metrics.MetricsShipper(send, max_queued=5, max_queued_bytes=10**6)
    shipper.start()

    def report() -> None:
        for step in range(20):
            shipper.put(MetricRecord("training", step, "{}", 0))

    putting = threading.Thread(target=report)
    putting.start()
    putting.join(0.3)
    assert putting.is_alive()  # blocked: one batch in flight, five records buffered
    answering.set()
    putting.join(10)
    shipper.close()
    assert sent == list(range(20))


def test_the_buffer_is_bounded_by_bytes_too() -> None:
    buffer = _metrics._Buffer(max_records=100, max_bytes=10)
    buffer.put(MetricRecord("training", 1, "x" * 50, 0))  # an empty buffer takes any record
    blocked = threading.Thread(target=buffer.put, args=(MetricRecord("training", 2, "y", 0),))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()
    assert buffer.get(block=True).steps_completed == 1  # type: ignore[union-attr]
    blocked.join(10)
    assert buffer.get(block=False).steps_completed == 2  # type: ignore[union-attr]
    assert buffer.get(block=False) is None


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("reports")
    with caplog.at_level(logging.WARNING, logger="determined.core"):
        outage.answered(now=1.0)
        for now in (10.0, 11.0, 12.5):
            outage.failed("UNAVAILABLE: gateway starting", now)
        outage.answered(now=40.0)
        outage.answered(now=41.0)
    assert caplog.messages == [
        "reports: waiting for the gateway (UNAVAILABLE: gateway starting)",
        "reports: the gateway answers again after 30.0 s",
    ]


def test_the_watcher_logs_an_outage_once(
    fake: FakeGateway, on_cluster: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.unavailable_watches = 4
    with det.core.init() as core_context, caplog.at_level(logging.WARNING, logger="determined.core"):
        assert core_context.preempt.should_preempt() is False
    lines = [m for m in caplog.messages if m.startswith("watching the allocation")]
    assert len(lines) == 2 and "waiting for the gateway" in lines[0] and "answers again" in lines[1]
