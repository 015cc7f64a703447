"""How fast a stop reaches the training loop: from the cluster's decision to stop an allocation
(its AllocationStopRequested event) to `core_context.preempt.should_preempt()` turning true in
the trial, and from invoking `det experiment pause` to the same moment.

One single-trial experiment whose trial polls `should_preempt()` every millisecond (a training
loop with 1 ms steps) and, the moment it is true, writes time.time_ns() to a file in a folder
the config passes in `environment.environment_variables`, then checkpoints and exits. The
bench pauses the experiment at a random moment of the loop, waits for the trial to exit, and
activates it again: the resumed trial restores its checkpoint and polls again. Each pause is
one sample. The decision's time is the AllocationStopRequested event's `occurred_at_ns`, read
afterwards with `python -m services.eventlog` (same host, same clock as the trial's).

Figures (median and p99 over the samples; with 20 samples p99 is the largest):
- `stop_requested_to_preempt_ms`: AllocationStopRequested appended -> should_preempt() true;
- `pause_invoked_to_preempt_ms`: `det experiment pause` invoked -> should_preempt() true;
- `paused_to_stop_requested_ms`: ExperimentStateChanged(PAUSED) -> AllocationStopRequested;
- `preempt_to_exited_ms`: should_preempt() true -> AllocationExited (checkpoint and exit);
- `activate_invoked_to_polling_ms`: `det experiment activate` invoked -> the resumed trial
  (restored from its checkpoint) polling should_preempt() again.

Starts its own cluster (2 CPU slots) in a temporary folder and stops it afterwards.
Usage: python bench/stop_latency.py [--reps 20]   (reps = pauses)
"""

import argparse
import json
import random
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import log, percentile, wait_for_quiet

TRAIN_PY = textwrap.dedent(
    """
    import os
    import time
    from pathlib import Path

    import determined as det

    out = Path(os.environ["BENCH_STOP_DIR"])
    info = det.get_cluster_info()
    alloc = info.allocation_id


    def mark(suffix, value):
        tmp = out / f".{alloc}.{suffix}"
        tmp.write_text(str(value))
        tmp.rename(out / f"{alloc}.{suffix}")


    with det.core.init() as core_context:
        step = 0
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                step = int((path / "step").read_text())
        core_context.preempt.should_preempt()
        mark("ready", time.time_ns())
        while True:
            if core_context.preempt.should_preempt():
                mark("stop", time.time_ns())
                break
            time.sleep(0.001)
            step += 1
        with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
            (path / "step").write_text(str(step))
    """
)


def config(stop_dir: Path) -> str:
    return json.dumps(
        {
            "name": "stop-latency",
            "entrypoint": "python3 train.py",
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1000000000}},
            "environment": {"environment_variables": [f"BENCH_STOP_DIR={stop_dir}"]},
            "max_restarts": 0,
        }
    )


def wait_for_file(folder: Path, suffix: str, known: set[str], timeout: float) -> tuple[str, int]:
    """The first `<allocation>.<suffix>` file not in `known`: (allocation id, its time_ns)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in folder.glob(f"*.{suffix}"):
            if path.name.startswith("."):  # being written
                continue
            alloc = path.name[: -len(suffix) - 1]
            if alloc not in known:
                return alloc, int(path.read_text())
        time.sleep(0.002)
    raise SystemExit(f"no new *.{suffix} in {folder} after {timeout:.0f} s")


def wait_for_trial_state(
    cluster: BenchCluster, experiment_id: int, states: tuple[str, ...], timeout: float = 120.0
) -> str:
    from determined.proto import api_pb2

    stub = cluster.stub()
    request = api_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        trials = stub.GetExperimentTrials(request).trials
        if trials and trials[0].state in states:
            return str(trials[0].state)
        time.sleep(0.02)
    raise SystemExit(f"experiment {experiment_id}'s trial not in {states} after {timeout:.0f} s")


def summary(name: str, values: list[float]) -> dict[str, float]:
    return {
        f"{name}_median": round(statistics.median(values), 2),
        f"{name}_p99": round(percentile(values, 99), 2),
    }


def measure(cluster: BenchCluster, folder: Path, stop_dir: Path, reps: int) -> dict[str, Any]:
    out = cluster.det("experiment", "create", str(folder / "config.yaml"), str(folder))
    experiment_id = created_experiment_id(out)
    samples: list[dict[str, Any]] = []
    ready_seen: set[str] = set()
    stop_seen: set[str] = set()
    activate_invoked = None
    try:
        for rep in range(reps):
            alloc, ready_ns = wait_for_file(stop_dir, "ready", ready_seen, 180)
            ready_seen.add(alloc)
            sample: dict[str, Any] = {"allocation": alloc}
            if activate_invoked is not None:
                sample["activate_invoked_to_polling_ms"] = (ready_ns - activate_invoked) / 1e6
            time.sleep(random.uniform(0.3, 0.6))  # a random moment of the polling loop
            invoked = time.time_ns()
            cluster.det("experiment", "pause", str(experiment_id))
            sample["pause_cli_ms"] = (time.time_ns() - invoked) / 1e6
            stopped, stop_ns = wait_for_file(stop_dir, "stop", stop_seen, 120)
            stop_seen.add(stopped)
            if stopped != alloc:
                raise SystemExit(f"allocation {stopped} stopped, expected {alloc}")
            sample["pause_invoked_ns"], sample["preempt_ns"] = invoked, stop_ns
            samples.append(sample)
            # The trial checkpoints and exits; then the experiment can run it again.
            wait_for_trial_state(cluster, experiment_id, ("PAUSED",))
            log(
                f"pause {rep + 1}/{reps}: {alloc} should_preempt after {(stop_ns - invoked) / 1e6:.1f} ms "
                "from invoking pause"
            )
            if rep + 1 < reps:
                wait_for_quiet(max_wait=10)
                activate_invoked = time.time_ns()
                cluster.det("experiment", "activate", str(experiment_id))
    finally:
        cluster.det("experiment", "kill", str(experiment_id))
        wait_for_state(cluster.stub(), experiment_id, timeout=120)

    events = cluster.events("allocation", "experiment")
    stop_requested: dict[str, int] = {}
    exited: dict[str, int] = {}
    paused_at: list[int] = []
    for e in events:
        if "allocation_stop_requested" in e:
            stop_requested.setdefault(
                e["allocation_stop_requested"]["allocation_id"], int(e["occurred_at_ns"])
            )
        elif "allocation_exited" in e:
            exited[e["allocation_exited"]["allocation_id"]] = int(e["occurred_at_ns"])
        elif (
            "experiment_state_changed" in e
            and e["aggregate"] == f"experiment/{experiment_id}"
            and e["experiment_state_changed"].get("state") == "EXPERIMENT_STATE_PAUSED"
        ):
            paused_at.append(int(e["occurred_at_ns"]))
    for sample in samples:
        alloc = sample["allocation"]
        if alloc in stop_requested:
            sample["stop_requested_to_preempt_ms"] = (sample["preempt_ns"] - stop_requested[alloc]) / 1e6
            paused = [p for p in paused_at if sample["pause_invoked_ns"] <= p <= stop_requested[alloc]]
            if paused:
                sample["paused_to_stop_requested_ms"] = (stop_requested[alloc] - paused[0]) / 1e6
        if alloc in exited:
            sample["preempt_to_exited_ms"] = (exited[alloc] - sample["preempt_ns"]) / 1e6
        sample["pause_invoked_to_preempt_ms"] = (sample["preempt_ns"] - sample["pause_invoked_ns"]) / 1e6

    result: dict[str, Any] = {"samples": len(samples)}
    for name in (
        "stop_requested_to_preempt_ms",
        "pause_invoked_to_preempt_ms",
        "paused_to_stop_requested_ms",
        "preempt_to_exited_ms",
        "activate_invoked_to_polling_ms",
        "pause_cli_ms",
    ):
        values = [s[name] for s in samples if name in s]
        if values:
            result.update(summary(name, values))
    result["per_sample"] = [
        {k: (round(v, 2) if isinstance(v, float) else v) for k, v in s.items() if not k.endswith("_ns")}
        for s in samples
    ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=20, help="pauses to measure (samples)")
    args = parser.parse_args()
    with local_cluster(cpu_slots=2) as cluster, tempfile.TemporaryDirectory() as tmp:
        folder, stop_dir = Path(tmp) / "context", Path(tmp) / "stops"
        folder.mkdir()
        stop_dir.mkdir()
        (folder / "train.py").write_text(TRAIN_PY)
        (folder / "config.yaml").write_text(config(stop_dir))
        result = measure(cluster, folder, stop_dir, args.reps)
    print(json.dumps({"bench": "stop_latency", **result}), flush=True)


if __name__ == "__main__":
    main()
