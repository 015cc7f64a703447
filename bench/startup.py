"""Start-up time of the services that replay the log: the searcher (search
and trial lifecycle cores) and the scheduler, each started as
`python -m services.<name>` on the generated log (bench/gen_log.py), timed
from the start of the process to its ready file (caught up with the log).
Prints seconds per run and the median; interpreter start-up and imports are
included.

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

from _recovery import DEFAULT_DATA_DIR, ensure_log, servers

SERVICES = ("searcher", "scheduler")
READY_WITHIN_S = 600.0


def time_to_ready(service: str, nats_url: str, namespace: str) -> float:
    """Seconds from starting the service to its ready file; the service is stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="det-bench-startup-") as folder:
        ready = Path(folder) / "ready"
        environment = {**os.environ, "DET_NATS_URL": nats_url, "DET_NAMESPACE": namespace,
                       "DET_READY_FILE": str(ready), "DET_LOG_LEVEL": "WARNING"}
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", f"services.{service}"], env=environment,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while not ready.exists():
                if process.poll() is not None:
                    raise SystemExit(f"{service} exited with {process.returncode}:\n{process.communicate()[1]}")
                if time.perf_counter() - started > READY_WITHIN_S:
                    raise SystemExit(f"{service} was not ready within {READY_WITHIN_S:.0f} s")
                time.sleep(0.01)
            return time.perf_counter() - started
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--fresh", action="store_true", help="remove --data-dir first (and generate the log again)")
    parser.add_argument("--only", choices=SERVICES, action="append", help="time only this service")
    args = parser.parse_args()
    with servers(args.data_dir, fresh=args.fresh) as running:
        namespace, last = asyncio.run(ensure_log(running.nats_url, args.events, args.seed))
        for service in args.only or SERVICES:
            seconds = []
            for run in range(1, args.runs + 1):
                seconds.append(time_to_ready(service, running.nats_url, namespace))
                print(f"{service} run {run}: ready in {seconds[-1]:.2f} s (load {os.getloadavg()[0]:.1f})", flush=True)
            print(f"{service} start-up on a {last:,}-event log: median {statistics.median(seconds):.2f} s"
                  f" over {len(seconds)} runs", flush=True)


if __name__ == "__main__":
    main()
