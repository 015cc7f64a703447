"""On-cluster reporting against a small in-process gateway that records what arrives.

The fake stores metric batches by batch_seq, as the real gateway does with its message ids,
and can refuse calls with UNAVAILABLE or be stopped and restarted on the same port.
"""

import json
import pathlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

import determined as det
from determined._client import TrialClient
from determined.core import _metrics
from determined.proto import api_pb2, api_pb2_grpc

TOKEN = "7:7.1:signature"


class FakeGateway(api_pb2_grpc.DeterminedServicer):
    def __init__(self) -> None:
        self.batches: dict[int, api_pb2.ReportMetricsRequest] = {}
        self.metric_calls = 0
        self.progress: list[float] = []
        self.checkpoints: list[api_pb2.ReportCheckpointRequest] = []
        self.order: list[str] = []
        self.unavailable_calls = 0
        self.lost_replies = 0
        self.fail_with: grpc.StatusCode | None = None
        self.tokens: set[str] = set()
        self.lock = threading.Lock()

    def _refuse(self, context: grpc.ServicerContext) -> None:
        self.tokens.add(dict(context.invocation_metadata()).get("x-allocation-token", ""))
        with self.lock:
            if self.unavailable_calls > 0:
                self.unavailable_calls -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "gateway starting")
        if self.fail_with is not None:
            context.abort(self.fail_with, "no such trial")

    def ReportMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.metric_calls += 1
        self._refuse(context)
        self.batches.setdefault(request.batch_seq, request)
        self.order.append("metrics")
        if self.lost_replies > 0:  # stored, but the reply never reaches the trial
            self.lost_replies -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
        return api_pb2.ReportMetricsResponse()

    def ReportProgress(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        self.progress.append(request.progress)
        return api_pb2.ReportProgressResponse()

    def ReportCheckpoint(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        self.checkpoints.append(request)
        self.order.append("checkpoint")
        return api_pb2.ReportCheckpointResponse()

    def reports(self) -> list[tuple[str, int, dict[str, Any]]]:
        return [
            (r.group, r.steps_completed, json.loads(r.metrics_json))
            for _, batch in sorted(self.batches.items())
            for r in batch.reports
        ]


class Server:
    """A gRPC server for the fake that can be stopped and started again on its port."""

    def __init__(self, gateway: FakeGateway) -> None:
        self.gateway = gateway
        self.port = 0
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        api_pb2_grpc.add_DeterminedServicer_to_server(self.gateway, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        self._server.start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.stop(grace=None).wait()


@pytest.fixture
def gateway() -> Iterator[Server]:
    server = Server(FakeGateway())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def on_cluster(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    """The environment the agent gives a trial; yields the checkpoint storage root."""
    config = {
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path), "storage_path": "ckpts"}
    }
    env = {
        "DET_MASTER": f"127.0.0.1:{gateway.port}",
        "DET_CLUSTER_ID": "c1",
        "DET_AGENT_ID": "a1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7",
        "DET_ALLOCATION_ID": "7.1",
        "DET_SESSION_TOKEN": TOKEN,
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "3",
        "DET_TRIAL_ID": "7",
        "DET_TRIAL_RUN_ID": "2",
        "DET_TRIAL_SEED": "1",
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        "DET_HPARAMS": "{}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    det.get_cluster_info.cache_clear()
    yield tmp_path / "ckpts"
    det.get_cluster_info.cache_clear()


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


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
    seqs = sorted(fake.batches)
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
