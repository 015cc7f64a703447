"""Start-up time of the services that replay the log: the searcher (search
and trial lifecycle cores) and the scheduler, each started as
`python -m services.<name>` on the generated log (bench/gen_log.py), timed
from the start of the process to its ready file (caught up with the log).
Interpreter start-up and imports are included.

For each service: one cold start (its snapshots removed first: the replay
from sequence 1 a first start, or a start after an upgrade, makes), then
--runs starts from the snapshot the previous one left (a restart).

    python bench/startup.py [--events 1000000] [--runs 3] [--data-dir /tmp/det-bench-recovery] [--fresh]

The servers and the log are kept in --data-dir (see bench/rebuild.py).
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats.js.errors
from _recovery import DEFAULT_DATA_DIR, ensure_log, servers

from services.common.eventlog import SNAPSHOTS_BUCKET
from services.common.eventstore import EventStore

SERVICES = ("searcher", "scheduler")
READY_WITHIN_S = 600.0


def time_to_ready(service: str, nats_url: str, namespace: str) -> float:
    """Seconds from starting the service to its ready file; the service is stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="det-bench-startup-") as folder:
        ready = Path(folder) / "ready"
        environment = {
            **os.environ,
            "DET_NATS_URL": nats_url,
            "DET_NAMESPACE": namespace,
            "DET_READY_FILE": str(ready),
            "DET_LOG_LEVEL": "WARNING",
        }
        started = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{service}"],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            while not ready.exists():
                if process.poll() is not None:
                    raise SystemExit(
                        f"{service} exited with {process.returncode}:\n{process.communicate()[1]}"
                    )
                if time.perf_counter() - started > READY_WITHIN_S:
                    raise SystemExit(f"{service} was not ready within {READY_WITHIN_S:.0f} s")
                time.sleep(0.01)
            return time.perf_counter() - started
        finally:
            process.terminate()
            process.wait(30)


async def remove_snapshots(nats_url: str, namespace: str) -> None:
    store = await EventStore.connect(nats_url, namespace, name="bench-startup")
    try:
        await store.js.delete_key_value(store.bucket_name(SNAPSHOTS_BUCKET))
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3, help="starts from a snapshot, after the cold one")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--fresh", action="store_true", help="remove --data-dir first (and generate the log again)"
    )
    parser.add_argument("--only", choices=SERVICES, action="append", help="time only this service")
    args = parser.parse_args()
    with servers(args.data_dir, fresh=args.fresh) as running:
        namespace, last = asyncio.run(ensure_log(running.nats_url, args.events, args.seed))
        for service in args.only or SERVICES:
            asyncio.run(remove_snapshots(running.nats_url, namespace))
            cold = time_to_ready(service, running.nats_url, namespace)
            print(
                f"{service} cold start (replays from sequence 1): ready in {cold:.2f} s"
                f" (load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            seconds = []
            for run in range(1, args.runs + 1):
                seconds.append(time_to_ready(service, running.nats_url, namespace))
                print(
                    f"{service} restart {run} (from its snapshot): ready in {seconds[-1]:.2f} s"
                    f" (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            print(
                f"{service} on a {last:,}-event log: cold start {cold:.2f} s, restart median"
                f" {statistics.median(seconds):.2f} s over {len(seconds)} runs",
                flush=True,
            )


if __name__ == "__main__":
    main()
