"""From `det notebook start --no-browser` to JupyterLab answering through the gateway's
proxy (the first 200 for `GET /proxy/<id>/`, redirects followed, with the user's token):

- cold: the first notebook on a fresh cluster;
- warm: the next ones (each killed, and ended, before the next starts), median of --reps.

Each figure is counted from invoking the CLI (its start included); the CLI's own exit,
once it printed the URL, is shown beside it, and the phases of the notebook's allocation
from the event log: requested -> assigned (scheduler) -> started (agent) -> ready
(JupyterLab answers the agent's probe). Starts its own cluster in a temporary folder,
prints the figures, stops it.
Usage: python bench/notebook_start.py [--reps 5]
"""

import argparse
import statistics
import subprocess
import sys
import time
from typing import Any

from _cluster import BenchCluster, local_cluster

from determined.common.states import TaskState

DEADLINE_S = 300.0
PHASES = ("allocation_requested", "allocation_assigned", "allocation_started", "allocation_ready")


def start_once(cluster: BenchCluster, token: str) -> tuple[float, float, str]:
    """Seconds from invoking the CLI to its exit and to the first 200 through the proxy;
    the notebook's id."""
    import httpx

    invoked = time.perf_counter()
    started = subprocess.run(
        [sys.executable, "-m", "determined.cli", "notebook", "start", "--no-browser"],
        env=cluster.env,
        capture_output=True,
        text=True,
        check=False,
    )
    cli_s = time.perf_counter() - invoked
    if started.returncode != 0:
        raise SystemExit(f"det notebook start failed:\n{started.stdout}{started.stderr}")
    url = started.stdout.strip().splitlines()[-1].rpartition(" ")[2]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(headers=headers, follow_redirects=True, timeout=30) as client:
        while client.get(url).status_code != 200:
            if time.perf_counter() - invoked > DEADLINE_S:
                raise SystemExit(f"{url} did not answer 200 within {DEADLINE_S:.0f} s")
            time.sleep(0.01)
    return cli_s, time.perf_counter() - invoked, url.rstrip("/").rpartition("/")[2]


def kill_and_wait(stub: Any, task_id: str) -> None:
    """Ends the notebook, so that the next one starts on an idle cluster with its slot free."""
    from determined.proto import api_pb2

    stub.KillTask(api_pb2.KillTaskRequest(task_id=task_id))
    deadline = time.monotonic() + DEADLINE_S
    while stub.GetTask(api_pb2.GetTaskRequest(task_id=task_id)).task.state != TaskState.TERMINATED:
        if time.monotonic() > deadline:
            raise SystemExit(f"notebook {task_id} did not end within {DEADLINE_S:.0f} s of its kill")
        time.sleep(0.05)


def phases(cluster: BenchCluster, task_ids: list[str]) -> list[list[float]]:
    """For each task: seconds from each phase of PHASES to the next, from the event log."""
    times: dict[str, dict[str, int]] = {}
    for event in cluster.events("allocation"):
        allocation = event["aggregate"].partition("/")[2]
        for name in PHASES:
            if name in event:
                times.setdefault(allocation, {})[name] = int(event["occurred_at_ns"])
    return [
        [(times[f"{t}.1"][b] - times[f"{t}.1"][a]) / 1e9 for a, b in zip(PHASES, PHASES[1:], strict=False)]
        for t in task_ids
    ]


def say_phases(label: str, steps: list[float]) -> None:
    names = [name.removeprefix("allocation_") for name in PHASES]
    print(
        f"  {label}: "
        + ", ".join(f"{a} -> {b} {s:.2f} s" for a, b, s in zip(names, names[1:], steps, strict=False))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="warm starts")
    args = parser.parse_args()
    from determined.cli._client import Gateway

    with local_cluster(cpu_slots=2) as cluster:
        gateway = Gateway(cluster.env["DET_MASTER"], environ=cluster.env)
        token = gateway.session.token() or ""
        runs, task_ids = [], []
        for _ in range(args.reps + 1):
            cli_s, first_200_s, task_id = start_once(cluster, token)
            runs.append((cli_s, first_200_s))
            task_ids.append(task_id)
            kill_and_wait(gateway.stub, task_id)
        steps = phases(cluster, task_ids)
    (cold_cli, cold_200), warm = runs[0], runs[1:]
    print(
        f"cold: det notebook start → first 200 through the proxy {cold_200:.2f} s (the CLI exited at {cold_cli:.2f} s)"
    )
    print(
        f"warm (median of {len(warm)}): {statistics.median(r[1] for r in warm):.2f} s "
        f"(min {min(r[1] for r in warm):.2f}, max {max(r[1] for r in warm):.2f}; "
        f"the CLI exited at {statistics.median(r[0] for r in warm):.2f} s)"
    )
    say_phases("cold", steps[0])
    say_phases("warm (medians)", [statistics.median(column) for column in zip(*steps[1:], strict=True)])


if __name__ == "__main__":
    main()
