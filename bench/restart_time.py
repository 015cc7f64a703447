"""How fast the supervisor brings a killed part back: for each part of an idle local cluster,
from its SIGKILL to

- `noticed_ms`: the supervisor's status file no longer shows the killed process running;
- `ready_ms`: a new process of the part runs and is ready, checked here independently of the
  supervisor: the service's ready file written by the new process; nats-server's port
  answering; PostgreSQL accepting connections (pg_isready).

It includes the supervisor's first backoff (0.5 s) and its 50 ms tick. Each round starts a
fresh cluster (so every kill is a part's first crash) and kills each part once, in turn,
waiting for every part to run again before the next. Prints a table and one JSON line
(median over the rounds of each part's figures, every round under "runs").

Usage: python bench/restart_time.py [--rounds 3]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from typing import Any

from _cluster import BenchCluster, local_cluster
from _report import emit, log, wait_for_quiet

from deploy.local.decisions import PARTS
from deploy.local.parts import port_answers
from deploy.local.servers import postgres_bin_dir

POLL_S = 0.005
DEADLINE_S = 120.0


def status(cluster: BenchCluster) -> dict[str, dict[str, Any]]:
    document = json.loads((cluster.data_dir / "run" / "status.json").read_text())
    return {part["name"]: part for part in document["parts"]}


def ready(cluster: BenchCluster, name: str) -> bool:
    """Ready by the part's own sign, not by the supervisor's word."""
    if name == "nats-server":
        return port_answers(cluster.nats_port)
    if name == "postgres":
        check = [
            str(postgres_bin_dir() / "pg_isready"),
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            str(cluster.postgres_port),
        ]
        return subprocess.run(check, check=False).returncode == 0
    return (cluster.data_dir / "run" / f"{name}.ready").exists()


def kill_and_time(cluster: BenchCluster, name: str) -> dict[str, float]:
    old_pid = status(cluster)[name]["pid"]
    killed = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    noticed = ready_at = 0.0
    while not ready_at:
        now = time.monotonic()
        if now - killed > DEADLINE_S:
            raise SystemExit(f"{name} was not back after {DEADLINE_S:.0f} s")
        part = status(cluster)[name]
        if not noticed and (part["pid"] != old_pid or part["state"] != "running"):
            noticed = now
        if part["pid"] not in (0, old_pid) and ready(cluster, name):
            ready_at = time.monotonic()
        time.sleep(POLL_S)
    return {"noticed_ms": (noticed - killed) * 1000, "ready_ms": (ready_at - killed) * 1000}


def wait_until_all_running(cluster: BenchCluster) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while {part["state"] for part in status(cluster).values()} != {"running"}:
        if time.monotonic() > deadline:
            raise SystemExit(f"the cluster did not settle: {status(cluster)}")
        time.sleep(0.1)


def one_round() -> dict[str, float]:
    figures: dict[str, float] = {}
    with local_cluster() as cluster:
        for name in PARTS:
            wait_until_all_running(cluster)
            wait_for_quiet(max_wait=10.0)
            timed = kill_and_time(cluster, name)
            log(f"{name}: noticed after {timed['noticed_ms']:.0f} ms, ready after {timed['ready_ms']:.0f} ms")
            figures.update({f"{name}_{key}": value for key, value in timed.items()})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    rounds = [one_round() for _ in range(parser.parse_args().rounds)]
    print(f"{'part':<12} {'noticed (ms)':>13} {'ready again (ms)':>17}   median of {len(rounds)} rounds")
    for name in PARTS:
        noticed = statistics.median(r[f"{name}_noticed_ms"] for r in rounds)
        ready_ms = statistics.median(r[f"{name}_ready_ms"] for r in rounds)
        print(f"{name:<12} {noticed:>13.0f} {ready_ms:>17.0f}")
    emit("restart_time", rounds)


if __name__ == "__main__":
    main()
