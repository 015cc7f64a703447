"""A small in-process gateway for the Core API tests: a real grpc server with a servicer
that implements the calls trial processes make and records what arrives.

Metric batches are stored by (batch_seq, reporter_id), as the real gateway does with its message
ids, and refused whole with INVALID_ARGUMENT past `max_batch_bytes` of JSON, as the real one
refuses an event too large for the event log; calls can be refused with UNAVAILABLE (a number of
them, or all while `down`, as during a nats-server outage), and the server stopped and restarted
on the same port.
WatchAllocation is a long poll with the real one's rules (answer at once when the caller's
stop or searcher_length is out of date or the searcher stopped the trial, else on a change or
after timeout_s); `decisions` plays the searcher: a validation at steps_completed S applies
`decisions[S]` to the allocation, as a rung decision would. Early exits are kept once (a second
report is refused with FAILED_PRECONDITION "already reported", as the real gateway does) and
the trial's metadata is replaced whole.
"""

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from typing import Any

import grpc
import pytest

import determined as det
from determined.proto import api_pb2, api_pb2_grpc

TOKEN = "7:7.1:signature"
ALLOCATION_ID = "7.1"
MAX_WATCH_S = 60.0


class FakeGateway(api_pb2_grpc.DeterminedServicer):
    def __init__(self) -> None:
        self.batches: dict[tuple[int, str], api_pb2.ReportMetricsRequest] = {}
        self.metric_calls = 0
        self.max_batch_bytes: int | None = None
        self.down = False
        self.calls = 0
        self.progress: list[float] = []
        self.checkpoints: list[api_pb2.ReportCheckpointRequest] = []
        self.deletions: list[list[str]] = []
        self.statuses: list[api_pb2.ReportStatusRequest] = []
        self.order: list[str] = []
        self.unavailable_calls = 0
        self.unavailable_watches = 0
        self.lost_replies = 0
        self.fail_with: grpc.StatusCode | None = None
        self.tokens: set[str] = set()
        self.lock = threading.Lock()
        # The allocation as WatchAllocation tells it; change it with `update()`.
        self.allocation = api_pb2.WatchAllocationResponse()
        self.closed = False
        self.watches: list[api_pb2.WatchAllocationRequest] = []
        self.acks: list[str] = []
        self.decisions: dict[int, dict[str, Any]] = {}
        self.best: float | None = None
        self.changed = threading.Condition()
        self.early_exits: list[str] = []
        self.early_exit_calls = 0
        self.metadata_json = "{}"
        self.metadata_sets: list[str] = []
        self.checkpoint_uses: list[tuple[int, str]] = []

    def update(self, *, closed: bool = False, **fields: Any) -> None:
        """Change the allocation (or close it) and wake the long polls."""
        with self.changed:
            for name, value in fields.items():
                setattr(self.allocation, name, value)
            self.closed = self.closed or closed
            self.changed.notify_all()

    def _refuse(self, context: grpc.ServicerContext) -> None:
        self.tokens.add(dict(context.invocation_metadata()).get("x-allocation-token", ""))
        with self.lock:
            self.calls += 1
            if self.down:
                context.abort(
                    grpc.StatusCode.UNAVAILABLE, "the event log (nats-server) is unavailable; retrying"
                )
            if self.unavailable_calls > 0:
                self.unavailable_calls -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "gateway starting")
        if self.fail_with is not None:
            context.abort(self.fail_with, "no such trial")

    def ReportMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.metric_calls += 1
        self._refuse(context)
        size = sum(len(report.metrics_json) for report in request.reports)
        if self.max_batch_bytes is not None and size > self.max_batch_bytes:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metrics batch {request.batch_seq} is too large for the event log: {size} bytes, "
                f"at most {self.max_batch_bytes}",
            )
        self.batches.setdefault((request.batch_seq, request.reporter_id), request)
        self.order.append("metrics")
        for report in request.reports:
            if report.group == "validation" and report.steps_completed in self.decisions:
                self.update(**self.decisions[report.steps_completed])
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

    def DeleteCheckpoints(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        self.deletions.append(list(request.uuids))
        return api_pb2.DeleteCheckpointsResponse()

    def ReportStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        self.statuses.append(request)
        return api_pb2.ReportStatusResponse()

    def GetBestValidation(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        if self.best is None:
            return api_pb2.GetBestValidationResponse(found=False)
        return api_pb2.GetBestValidationResponse(found=True, metric=self.best)

    def ReportEarlyExit(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.early_exit_calls += 1
        self._refuse(context)
        if request.reason not in ("INVALID_HP", "USER_REQUESTED_STOP"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad reason {request.reason!r}")
        if self.early_exits:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"an early exit of trial {request.trial_id} was already reported ({self.early_exits[0]})",
            )
        self.early_exits.append(request.reason)
        if self.lost_replies > 0:  # stored, but the reply never reaches the trial
            self.lost_replies -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")
        return api_pb2.ReportEarlyExitResponse()

    def SetTrialMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        if not isinstance(json.loads(request.metadata_json), dict):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "metadata_json must be a JSON object")
        self.metadata_json = request.metadata_json
        self.metadata_sets.append(request.metadata_json)
        return api_pb2.SetTrialMetadataResponse()

    def ReportCheckpointUse(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        self.checkpoint_uses.append((request.trial_id, request.checkpoint_uuid))
        return api_pb2.ReportCheckpointUseResponse()

    def GetTrialMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        return api_pb2.GetTrialMetadataResponse(metadata_json=self.metadata_json)

    def AcknowledgeStop(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._refuse(context)
        if self.closed or not self.allocation.stop:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "nothing to acknowledge")
        self.acks.append(request.allocation_id)
        return api_pb2.AcknowledgeStopResponse()

    def WatchAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.tokens.add(dict(context.invocation_metadata()).get("x-allocation-token", ""))
        self.watches.append(request)
        with self.lock:
            if self.unavailable_watches > 0:
                self.unavailable_watches -= 1
                context.abort(grpc.StatusCode.UNAVAILABLE, "gateway starting")
        deadline = time.monotonic() + min(request.timeout_s, MAX_WATCH_S)
        with self.changed:
            while True:
                if self.closed:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"allocation {ALLOCATION_ID} exited")
                answer = api_pb2.WatchAllocationResponse()
                answer.CopyFrom(self.allocation)
                known = (answer.stop, answer.searcher_length) == (request.stop, request.searcher_length)
                remaining = deadline - time.monotonic()
                if not known or answer.searcher_stopped or remaining <= 0 or not context.is_active():
                    return answer
                self.changed.wait(min(remaining, 0.05))

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
        self._server = grpc.server(futures.ThreadPoolExecutor(8))
        api_pb2_grpc.add_DeterminedServicer_to_server(self.gateway, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        self._server.start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.stop(grace=None).wait()


@contextlib.contextmanager
def serving(servicer: api_pb2_grpc.DeterminedServicer) -> Iterator[str]:
    """A gRPC server for a test's own servicer (the CLI tests'): its address
    while the block runs."""
    server = Server(servicer)  # type: ignore[arg-type]
    server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        server.stop()


def set_trial_env(
    monkeypatch: pytest.MonkeyPatch, port: int, config: Mapping[str, Any], **extra: str
) -> None:
    """The environment the agent gives a trial talking to the fake on `port`."""
    env = {
        "DET_MASTER": f"127.0.0.1:{port}",
        "DET_CLUSTER_ID": "c1",
        "DET_AGENT_ID": "a1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "7",
        "DET_ALLOCATION_ID": ALLOCATION_ID,
        "DET_SESSION_TOKEN": TOKEN,
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "3",
        "DET_TRIAL_ID": "7",
        "DET_TRIAL_RUN_ID": "2",
        "DET_TRIAL_SEED": "1",
        "DET_EXPERIMENT_CONFIG": json.dumps(config),
        "DET_HPARAMS": "{}",
        **extra,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    det.get_cluster_info.cache_clear()


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
