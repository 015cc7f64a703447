"""How long one `report_training_metrics` call blocks the training loop.

Runs the real on-cluster path (validation, queue, shipper thread, gRPC) against an
in-process gateway that accepts and discards every call, and prints the median and p99
of the caller's blocking time plus the time to drain the queue at exit.

    python bench/metrics_call_latency.py [calls]
"""

import json
import os
import statistics
import sys
import time
from concurrent import futures
from typing import Any

import grpc

import determined as det
from determined.proto import api_pb2, api_pb2_grpc


class NullGateway(api_pb2_grpc.DeterminedServicer):
    def __init__(self) -> None:
        self.reports = 0
        self.batches = 0

    def ReportMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.reports += len(request.reports)
        self.batches += 1
        return api_pb2.ReportMetricsResponse()


def start_gateway(gateway: NullGateway) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    api_pb2_grpc.add_DeterminedServicer_to_server(gateway, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def set_trial_environment(port: int) -> None:
    os.environ.update(
        {
            "DET_MASTER": f"127.0.0.1:{port}",
            "DET_CLUSTER_ID": "bench",
            "DET_AGENT_ID": "bench",
            "DET_SLOT_IDS": "[0]",
            "DET_TASK_ID": "1",
            "DET_ALLOCATION_ID": "1.1",
            "DET_SESSION_TOKEN": "t",
            "DET_TASK_TYPE": "TRIAL",
            "DET_EXPERIMENT_ID": "1",
            "DET_TRIAL_ID": "1",
            "DET_TRIAL_RUN_ID": "1",
            "DET_EXPERIMENT_CONFIG": json.dumps(
                {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"}}
            ),
        }
    )


def main(calls: int) -> None:
    gateway = NullGateway()
    server, port = start_gateway(gateway)
    set_trial_environment(port)
    durations = [0] * calls
    clock = time.perf_counter_ns
    with det.core.init() as core_context:
        report = core_context.train.report_training_metrics
        started = clock()
        for step in range(calls):
            metrics = {f"metric_{i}": step * 0.001 + i for i in range(10)}
            before = clock()
            report(step, metrics)
            durations[step] = clock() - before
        loop_done = clock()
    drained = clock()
    server.stop(None)
    durations.sort()
    print(f"calls:            {calls} x report_training_metrics with 10 metrics")
    print(f"median per call:  {statistics.median(durations) / 1000:.1f} us")
    print(f"p99 per call:     {durations[int(calls * 0.99)] / 1000:.1f} us")
    print(f"max per call:     {durations[-1] / 1000:.1f} us")
    print(f"loop total:       {(loop_done - started) / 1e9:.2f} s")
    print(f"drain at exit:    {(drained - loop_done) / 1e9:.2f} s")
    print(f"gateway received: {gateway.reports} reports in {gateway.batches} batches")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
