"""On-cluster reporting against a small in-process gateway that records what arrives
(`core_gateway`)."""

import json
import pathlib
import socket
import time
from collections.abc import Iterator

import grpc
import pytest
from support.core_gateway import TOKEN, Server, set_trial_env, wait_for

import determined as det
from determined._client import TrialClient
from determined.core import _metrics


@pytest.fixture
def on_cluster(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    """The environment the agent gives a trial; yields the checkpoint storage root."""
    config = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"}
    }
    set_trial_env(monkeypatch, gateway.port, config)
    yield tmp_path / "ckpts"
    det.get_cluster_info.cache_clear()


def test_reports_arrive_in_order_in_batches_with_token(gateway: Server, on_cluster: pathlib.Path) -> None:
    with det.core.init() as core_context:
        for step in range(1, 2501):
            core_context.train.report_training_metrics(step, {"loss": 1 / step, "step": step})
        core_context.train.report_validation_metrics(2500, {"val_loss": 0.5})
    fake = gateway.gateway
    assert [(g, s) for g, s, _ in fake.reports()] == [("training", s) for s in range(1, 2501)] + [
        ("validation", 2500)
    ]
    assert fake.reports()[-2][2] == {"loss": 1 / 2500, "step": 2500}
    seqs = sorted(seq for seq, _ in fake.batches)
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert all(len(batch.reports) <= _metrics.MAX_BATCH_REPORTS for batch in fake.batches.values())
    assert {(b.trial_id, b.trial_run_id) for b in fake.batches.values()} == {(7, 2)}
    assert fake.tokens == {TOKEN}


def test_batches_stay_under_the_byte_limit(gateway: Server, on_cluster: pathlib.Path) -> None:
    big = "x" * 50_000
    with det.core.init() as core_context:
        for step in range(20):
            core_context.train.report_metrics("text", step, {"blob": big})
    batches = gateway.gateway.batches.values()
    assert sum(len(b.reports) for b in batches) == 20
    assert all(sum(len(r.metrics_json) for r in b.reports) <= _metrics.MAX_BATCH_BYTES for b in batches)


def test_unavailable_calls_are_retried_with_the_same_batch(gateway: Server, on_cluster: pathlib.Path) -> None:
    gateway.gateway.unavailable_calls = 3
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"loss": 1.0})
        core_context.train.report_progress(0.25)
    fake = gateway.gateway
    assert [s for _, s, _ in fake.reports()] == [1]
    assert len(fake.batches) == 1
    assert fake.progress == [0.25]


def test_a_batch_whose_reply_was_lost_is_resent_with_its_batch_seq(
    gateway: Server, on_cluster: pathlib.Path
) -> None:
    gateway.gateway.lost_replies = 2
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"loss": 1.0})
    fake = gateway.gateway
    assert fake.metric_calls == 3 and len(fake.batches) == 1
    assert [s for _, s, _ in fake.reports()] == [1]


def test_a_gateway_restart_loses_and_repeats_nothing(gateway: Server, on_cluster: pathlib.Path) -> None:
    fake = gateway.gateway
    with det.core.init() as core_context:
        for step in range(100):
            core_context.train.report_training_metrics(step, {"loss": float(step)})
        core_context._metrics.flush()  # type: ignore[union-attr]
        gateway.stop()
        for step in range(100, 200):
            core_context.train.report_training_metrics(step, {"loss": float(step)})
        calls_while_down = fake.metric_calls
        time.sleep(0.3)  # let the shipper fail against the stopped gateway a few times
        assert fake.metric_calls == calls_while_down
        gateway.start()
        for step in range(200, 300):
            core_context.train.report_training_metrics(step, {"loss": float(step)})
    assert [s for _, s, _ in fake.reports()] == list(range(300))
    assert fake.metric_calls == len(fake.batches)  # every batch was stored by its first delivery


def test_retries_end_after_the_retry_window() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket is closed
    client = TrialClient(f"http://127.0.0.1:{port}", TOKEN, retry_for_s=0.5)
    started = time.monotonic()
    with pytest.raises(grpc.RpcError) as error:
        client.report_progress(7, 0.5)
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    assert 0.3 < time.monotonic() - started < 5
    client.close()


def test_a_non_transient_error_is_raised_on_the_next_call(gateway: Server, on_cluster: pathlib.Path) -> None:
    gateway.gateway.fail_with = grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError), det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"loss": 1.0})
        wait_for(lambda: core_context._metrics._error is not None)  # type: ignore[union-attr]
        core_context.train.report_training_metrics(2, {"loss": 1.0})


def test_metrics_are_flushed_when_the_process_exits_without_closing(
    gateway: Server, on_cluster: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import determined as det\n"
        "core_context = det.core.init().__enter__()\n"
        "for step in range(500):\n"
        "    core_context.train.report_training_metrics(step, {'loss': 1.0})\n"
    )
    subprocess.run([sys.executable, str(script)], env=dict(os.environ), check=True, timeout=60)
    assert [s for _, s, _ in gateway.gateway.reports()] == list(range(500))


def test_store_path_writes_metadata_and_reports_resources_after_metrics(
    gateway: Server, on_cluster: pathlib.Path
) -> None:
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(10, {"loss": 1.0})
        with core_context.checkpoint.store_path({"steps_completed": 10, "epoch": 1}) as (path, storage_id):
            (path / "model").mkdir()
            (path / "model" / "weights.bin").write_bytes(b"x" * 100)
        with core_context.checkpoint.restore_path(storage_id) as restored:
            assert (restored / "model" / "weights.bin").stat().st_size == 100
        missing = "00000000-0000-0000-0000-000000000000"
        with pytest.raises(FileNotFoundError, match=missing), core_context.checkpoint.restore_path(missing):
            pass
    fake = gateway.gateway
    assert path == on_cluster / storage_id
    metadata = json.loads((path / "metadata.json").read_text())
    assert metadata == {"steps_completed": 10, "epoch": 1}
    (report,) = fake.checkpoints
    assert (report.uuid, report.trial_id, report.allocation_id, report.steps_completed) == (
        storage_id,
        7,
        "7.1",
        10,
    )
    assert json.loads(report.metadata_json) == metadata
    assert dict(report.resources) == {
        "model/": 0,
        "model/weights.bin": 100,
        "metadata.json": (path / "metadata.json").stat().st_size,
    }
    assert fake.order == ["metrics", "checkpoint"]


def test_progress_outside_zero_to_one_is_refused(gateway: Server, on_cluster: pathlib.Path) -> None:
    with det.core.init() as core_context:
        with pytest.raises(ValueError, match="between 0 and 1"):
            core_context.train.report_progress(1.01)
        core_context.train.report_progress(1)
        assert core_context.preempt.should_preempt() is False
    assert gateway.gateway.progress == [1.0]


def test_a_multi_slot_task_needs_a_distributed_context(
    on_cluster: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_SLOT_IDS", "[0, 1]")
    det.get_cluster_info.cache_clear()
    with pytest.raises(ValueError, match="you must provide a valid DistributedContext for a multi-slot task"):
        det.core.init()


def test_reporting_outside_the_with_block_is_explained(on_cluster: pathlib.Path) -> None:
    core_context = det.core.init()
    with pytest.raises(RuntimeError, match="with det.core.init"):
        core_context.train.report_training_metrics(1, {"loss": 1.0})
    core_context.close()


def test_validations_must_carry_the_searcher_metrics(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "time_metric": "batches",
        "max_time": 937,
    }
    storage = {"type": "directory", "container_path": str(tmp_path)}
    set_trial_env(monkeypatch, gateway.port, {"searcher": searcher, "checkpoint_storage": storage})
    with det.core.init() as core_context:
        train = core_context.train
        with pytest.raises(
            ValueError, match=r"the searcher metric 'validation_loss' \(searcher.metric\); reported: loss"
        ):
            train.report_validation_metrics(10, {"loss": 1.0})
        with pytest.raises(ValueError, match=r"the time metric 'batches' \(searcher.time_metric\)"):
            train.report_metrics("validation", 10, {"validation_loss": 1.0})
        train.report_metrics("training", 10, {"loss": 1.0})
        train.report_validation_metrics(10, {"validation_loss": 0.5, "batches": 10})
    assert [(g, s) for g, s, _ in gateway.gateway.reports()] == [("training", 10), ("validation", 10)]
    det.get_cluster_info.cache_clear()


def test_status_and_best_validation(gateway: Server, on_cluster: pathlib.Path) -> None:
    fake = gateway.gateway
    with det.core.init() as core_context:
        train = core_context.train
        train.set_status("training")
        train.set_status("validating")
        with pytest.raises(ValueError, match="status must be a non-empty string"):
            train.set_status("")
        with pytest.raises(TypeError, match="status must be a str, got NoneType"):
            train.set_status(None)  # type: ignore[arg-type]
        assert train.get_experiment_best_validation() is None
        fake.best = 0.25
        assert train.get_experiment_best_validation() == 0.25
    assert [(s.trial_id, s.status) for s in fake.statuses] == [(7, "training"), (7, "validating")]
    first, second = fake.statuses
    assert first.reporter_id == second.reporter_id != "" and 1 <= first.seq < second.seq
