"""What-if scheduling on the generated log (bench/gen_log.py): what `det events
simulate` spends over the whole log's workload (issue 21: ~26k trials of the
1M-event log in under 30 s), but for the login and the answer's transfer. The
gateway's part (GetWorkload: the allocation, agent and experiment events read
and folded, services/gateway/features/events/workload_service.py), the
answer encoded and decoded, then the CLI's part (the scheduler's core
replaying it, services/scheduler/simulate.py, and the report) under the
recorded settings, which must reproduce every recorded assignment, and under
the other scheduler.

    python bench/simulate.py [--events 1000000] [--data-dir /tmp/det-bench-recovery] [--fresh]

The servers and the log are kept in --data-dir (bench/_recovery.py): a second
run does not generate the log again.
"""

import argparse
import asyncio
import os
import time
from pathlib import Path

from _recovery import DEFAULT_DATA_DIR, ensure_log, servers

from determined.proto import api_pb2
from services.common.eventstore import EventStore
from services.common.job_queue import KvJobQueueBoard, PublishedQueue
from services.common.logging import configure_logging
from services.gateway.features.events.workload_service import recorded_workload
from services.scheduler.simulate import Settings, simulate
from services.scheduler.simulate_report import report


def timed(what: str, started: tuple[float, float]) -> float:
    """Prints the wall and CPU seconds since `started` (perf_counter, process_time)."""
    wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
    print(f"  {what}: {wall:.2f} s ({cpu:.2f} s CPU, load {os.getloadavg()[0]:.1f})", flush=True)
    return wall


def now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


async def read_workload(nats_url: str, namespace: str) -> api_pb2.GetWorkloadResponse:
    store = await EventStore.connect(nats_url, namespace, name="bench-simulate")
    try:
        queue = await KvJobQueueBoard(store).read() or PublishedQueue()
        return await recorded_workload(store, api_pb2.GetWorkloadRequest(), queue)
    finally:
        await store.close()


def bench(args: argparse.Namespace) -> None:
    with servers(args.data_dir, fresh=args.fresh) as running:
        namespace, last = asyncio.run(ensure_log(running.nats_url, args.events, args.seed))
        print(f"det events simulate over the workload of a {last:,}-event log:", flush=True)
        started = now()
        gateway = now()
        workload = asyncio.run(read_workload(running.nats_url, namespace))
        timed("GetWorkload (read and fold)", gateway)
        answer = workload.SerializeToString()
        workload = api_pb2.GetWorkloadResponse.FromString(answer)
        tasks = len({a.task_id for a in workload.allocations})
        print(
            f"  {len(workload.allocations):,} allocations of {tasks:,} tasks, {len(workload.agents)} agents;"
            f" the answer is {len(answer) / 2**20:.1f} MiB",
            flush=True,
        )
        simulating = now()
        said = report(workload, simulate(workload))
        timed("simulated as recorded", simulating)
        total = timed("in all (det events simulate but for login and transfer)", started)
        print(
            f"  reproduced {said.reproduced:,} of {said.assignments:,} recorded assignments {said.difference}"
        )
        other = now()
        other_report = report(workload, simulate(workload, Settings(scheduler="priority")))
        timed("simulated with the priority scheduler", other)
        recorded, simulated = other_report.total.recorded, other_report.total.simulated
        print(
            f"  queue time recorded {recorded.queue_ns / 3.6e12:,.1f} h, with priority"
            f" {simulated.queue_ns / 3.6e12:,.1f} h; slot-hours {recorded.slot_ns / 3.6e12:,.0f}"
            f" / {simulated.slot_ns / 3.6e12:,.0f}"
        )
        print(f"simulate over a {last:,}-event log's workload: {total:.1f} s (target < 30 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--fresh", action="store_true", help="remove --data-dir first (and generate the log again)"
    )
    args = parser.parse_args()
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    bench(args)


if __name__ == "__main__":
    main()
