"""Chart request latency: a trial with 1,000,000 training points (reported
through the gateway, as a trial does, and projected into PostgreSQL), then
`GET /api/v1/trials/1/metrics?metric=loss&max_points=1000` over HTTP, timed
end to end (the client's wall time, JSON parsed), and its two parts alone:
the read models' preselection (each range's lowest and highest point, in
PostgreSQL) and the LTTB reduction. Starts its
own nats-server and PostgreSQL and the gateway in-process. Prints figures;
asserts nothing.

    python bench/metrics_chart.py [--points 1000000] [--requests 10] [--max-points 1000]
"""

import argparse
import json
import math
import statistics
import time

import grpc
import httpx
from _servers import SECRET, gateway_settings, run_with_servers

from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.tokens import mint_allocation_token
from services.gateway.downsample import lttb
from services.gateway.server import Gateway

PASSWORD = "Bench-Password1"
REPORTS_PER_BATCH = 1000


async def given_trial(gateway: Gateway, points: int) -> None:
    """Trial 1 with `points` training reports of loss and accuracy, all projected."""
    created = events_pb2.TrialCreated(trial_id=1, experiment_id=1, hparams_json="{}")
    await gateway.store.append(Append("trial/1", created, "trial-1"), actor="service:bench")
    launch = events_pb2.TrialLaunch(experiment_id=1, trial_id=1, trial_run_id=1)
    requested = events_pb2.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", trial=launch
    )
    await gateway.store.append(Append("allocation/1.1", requested, "requested-1"), actor="service:bench")
    await gateway.projector.catch_up()
    token = mint_allocation_token(SECRET, 1, "1.1")
    started = time.perf_counter()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        for batch_seq, first in enumerate(range(1, points + 1, REPORTS_PER_BATCH), start=1):
            reports = [
                events_pb2.MetricReport(
                    group="training",
                    steps_completed=step,
                    metrics_json=json.dumps(
                        {
                            "loss": math.exp(-step / 200_000) + 0.05 * math.sin(step / 5000),
                            "accuracy": 1 - math.exp(-step / 100_000),
                        }
                    ),
                )
                for step in range(first, min(first + REPORTS_PER_BATCH, points + 1))
            ]
            request = api_pb2.ReportMetricsRequest(
                trial_id=1, trial_run_id=1, batch_seq=batch_seq, reports=reports
            )
            await api.ReportMetrics(request, metadata=(("x-allocation-token", token),))
    await gateway.projector.catch_up(timeout_s=600.0)
    stored = await gateway.pool.fetchval("SELECT count(*) FROM read_model.metrics WHERE trial_id = 1")
    print(f"{stored:,} points stored in {time.perf_counter() - started:.1f} s")


async def timed_requests(gateway: Gateway, requests: int, max_points: int) -> list[float]:
    assert gateway.http is not None
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gateway.http.port}", timeout=60) as http:
        login = await http.post(
            "/api/v1/auth/login",
            json={"username": "admin", "password": salted_hash(PASSWORD), "isHashed": True},
        )
        headers = {"authorization": f"Bearer {login.json()['token']}"}
        seconds = []
        for _ in range(requests):
            started = time.perf_counter()
            answer = await http.get(
                f"/api/v1/trials/1/metrics?metric=loss&max_points={max_points}", headers=headers
            )
            chart = answer.json()
            seconds.append(time.perf_counter() - started)
        print(
            f"answer: {len(chart['steps'])} of {chart['totalPoints']:,} points, {len(answer.content):,} bytes"
        )
        return seconds


async def parts(gateway: Gateway, max_points: int) -> tuple[float, float]:
    """The read models' preselection and the LTTB reduction alone, seconds each (median of 3)."""
    queries, reductions = [], []
    for _ in range(3):
        started = time.perf_counter()
        _, chosen = await gateway.api.trials.metric_chart(1, "training", "loss", 2 * max_points)
        queries.append(time.perf_counter() - started)
        started = time.perf_counter()
        lttb(chosen, max_points)
        reductions.append(time.perf_counter() - started)
    return statistics.median(queries), statistics.median(reductions)


async def bench(args: argparse.Namespace, nats_url: str, postgres_url: str) -> None:
    settings = await gateway_settings(nats_url, postgres_url, http_port=0, initial_user_password=PASSWORD)
    gateway = await Gateway.start(settings)
    try:
        await given_trial(gateway, args.points)
        seconds = await timed_requests(gateway, args.requests, args.max_points)
        query_s, lttb_s = await parts(gateway, args.max_points)
    finally:
        await gateway.stop()
    ms = sorted(s * 1000 for s in seconds)
    print(
        f"chart request, {args.points:,} points -> {args.max_points}: median {statistics.median(ms):.0f} ms, "
        f"min {ms[0]:.0f} ms, max {ms[-1]:.0f} ms over {len(ms)} requests "
        f"(read-model preselection {query_s * 1000:.0f} ms, LTTB {lttb_s * 1000:.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--max-points", type=int, default=1000)
    args = parser.parse_args()
    run_with_servers(bench, args)


if __name__ == "__main__":
    main()
