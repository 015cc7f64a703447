"""Metric ingestion, end to end: one simulated trial calls ReportMetrics in
batches (10 metric values per report) and we time how fast the values reach
the PostgreSQL metrics table through the gateway, JetStream and the
projector. Starts its own nats-server and PostgreSQL (deploy/local/servers.py)
and the gateway in-process. Prints the median of several runs; asserts
nothing.

    python bench/metric_ingestion.py [--runs 5] [--values 200000] [--reports-per-batch 100]
"""

import argparse
import asyncio
import json
import statistics
import time

import grpc
from _servers import SECRET, gateway_settings, run_with_servers

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway

VALUES_PER_REPORT = 10


def batches(trial_id: int, values: int, reports_per_batch: int) -> list[api_pb2.ReportMetricsRequest]:
    reports = values // VALUES_PER_REPORT
    metrics = json.dumps({f"metric_{i}": 0.5 + i for i in range(VALUES_PER_REPORT)})
    requests = []
    for batch_seq, first in enumerate(range(0, reports, reports_per_batch), start=1):
        batch = [
            events_pb2.MetricReport(
                group="training",
                steps_completed=step + 1,
                metrics_json=metrics,
                reported_at_ns=time.time_ns(),
            )
            for step in range(first, min(first + reports_per_batch, reports))
        ]
        requests.append(
            api_pb2.ReportMetricsRequest(
                trial_id=trial_id, trial_run_id=1, batch_seq=batch_seq, reports=batch
            )
        )
    return requests


async def one_run(gateway: Gateway, trial_id: int, values: int, reports_per_batch: int) -> float:
    """Metric values per second from the first report to the last row stored."""
    created = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=1)
    await gateway.store.append(
        Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:bench"
    )
    # Reports are accepted only from the trial's current, open allocation.
    launch = events_pb2.TrialLaunch(experiment_id=1, trial_id=trial_id, trial_run_id=1)
    requested = events_pb2.AllocationRequested(
        allocation_id=f"{trial_id}.1", task_id=str(trial_id), trial=launch
    )
    await gateway.store.append(
        Append(f"allocation/{trial_id}.1", requested, f"requested-{trial_id}"), actor="service:bench"
    )
    await gateway.projector.catch_up()
    requests = batches(trial_id, values, reports_per_batch)
    expected_rows = sum(len(r.reports) for r in requests)
    token = mint_allocation_token(SECRET, trial_id, f"{trial_id}.1")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        started = time.perf_counter()
        for request in requests:
            await api.ReportMetrics(request, metadata=(("x-allocation-token", token),))
        while (
            await gateway.pool.fetchval(
                "SELECT count(*) FROM read_model.metrics WHERE trial_id = $1", trial_id
            )
            < expected_rows
        ):
            await asyncio.sleep(0.005)
        elapsed = time.perf_counter() - started
    return expected_rows * VALUES_PER_REPORT / elapsed


async def bench(args: argparse.Namespace, nats_url: str, postgres_url: str) -> list[float]:
    settings = await gateway_settings(nats_url, postgres_url, allow_blank_password=True)
    gateway = await Gateway.start(settings)
    try:
        rates = []
        for run in range(1, args.runs + 1):
            rate = await one_run(gateway, run, args.values, args.reports_per_batch)
            print(f"run {run}: {rate:,.0f} metric values/s")
            rates.append(rate)
        return rates
    finally:
        await gateway.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--values", type=int, default=200_000, help="metric values per run")
    parser.add_argument("--reports-per-batch", type=int, default=100)
    args = parser.parse_args()
    rates = run_with_servers(bench, args)
    print(
        f"metric ingestion, end to end ({args.reports_per_batch} reports x {VALUES_PER_REPORT} values per "
        f"batch): median {statistics.median(rates):,.0f} metric values/s over {len(rates)} runs"
    )


if __name__ == "__main__":
    main()
