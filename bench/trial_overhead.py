"""What a trial costs beyond its own work, against Ray Tune (the peers' ray_tune_overhead.py
--mode fifo, with and without --reuse-actors): 64 trivial trials (10 validation reports each,
no sleep) on 2 CPU slots, two at a time (a `random` searcher, max_trials 64,
max_concurrent_trials 2, a const hyperparameter).

Per rep: the wall time from invoking `det experiment create` to the experiment being COMPLETED,
and that divided by 64 (`per_trial_s`, Ray's `wall_per_trial_s`). From the event log it also
splits an allocation's life into phases (medians, ms): requested -> assigned (scheduler),
assigned -> started (agent: unpack the context, spawn), started -> exited (the trial process:
Python start, `import determined`, 10 reports, close), exited -> trial ended (lifecycle), and
trial ended -> the next trial's allocation requested (searcher + lifecycle).

Starts its own cluster (2 CPU slots) in a temporary folder and stops it afterwards. Trials start
as cluster-up starts them by default (forked from the agent's warm fork server); --no-fork-trials:
each a new process; --runtime docker --image IMAGE: each in a container.
Usage: python bench/trial_overhead.py [--reps 1] [--trials 64] [--no-fork-trials | --runtime docker --image I]
"""

import argparse
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import busy_cpu_s, emit, log, wait_for_quiet

TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    info = det.get_cluster_info()
    lr = info.trial.hparams["lr"]
    with det.core.init() as core_context:
        for it in range(1, 11):
            core_context.train.report_validation_metrics(
                steps_completed=it, metrics={"loss": (lr - 0.1) ** 2 + 1.0 / (it + 1)})
    """
)


def config(trials: int, image: str = "") -> str:
    return json.dumps(
        {
            **({"environment": {"image": image}} if image else {}),
            "name": "trial-overhead",
            "entrypoint": "python3 train.py",
            "hyperparameters": {"lr": {"type": "const", "val": 0.01}},
            "searcher": {
                "name": "random",
                "metric": "loss",
                "max_trials": trials,
                "max_concurrent_trials": 2,
            },
            "max_restarts": 0,
        }
    )


def _ns(event: dict[str, Any]) -> int:
    return int(event["occurred_at_ns"])


def phases(cluster: BenchCluster, experiment_id: int) -> dict[str, float]:
    """Medians (ms) of the phases of this experiment's allocations, from the event log."""
    events = cluster.events("allocation", "trial")
    trials = {
        int(e["trial_created"]["trial_id"])
        for e in events
        if "trial_created" in e and int(e["trial_created"].get("experiment_id", 0)) == experiment_id
    }
    by_alloc: dict[str, dict[str, int]] = {}
    trial_ended: dict[int, int] = {}
    for e in events:
        aggregate = e["aggregate"]
        kind, _, ident = aggregate.partition("/")
        if kind == "allocation" and int(ident.split(".")[0]) in trials:
            for name in (
                "allocation_requested",
                "allocation_assigned",
                "allocation_started",
                "allocation_exited",
            ):
                if name in e:
                    by_alloc.setdefault(ident, {})[name] = _ns(e)
        elif kind == "trial" and "trial_ended" in e and int(ident) in trials:
            trial_ended[int(ident)] = _ns(e)

    def median_ms(pairs: list[tuple[int, int]]) -> float | None:
        return round(statistics.median(b - a for a, b in pairs) / 1e6, 1) if pairs else None

    def between(a: str, b: str) -> list[tuple[int, int]]:
        return [(t[a], t[b]) for t in by_alloc.values() if a in t and b in t]

    ended = [
        (trial_ended[int(i.split(".")[0])], t["allocation_exited"])
        for i, t in by_alloc.items()
        if "allocation_exited" in t and int(i.split(".")[0]) in trial_ended
    ]
    # Each trial's end frees a slot for the next request: pair each end with the first
    # request that follows it.
    requests = sorted(t["allocation_requested"] for t in by_alloc.values() if "allocation_requested" in t)
    refill = []
    for end in sorted(trial_ended.values()):
        later = [r for r in requests if r >= end]
        if later:
            refill.append((end, later[0]))
            requests.remove(later[0])
    return {
        "requested_to_assigned_ms": median_ms(between("allocation_requested", "allocation_assigned")),
        "assigned_to_started_ms": median_ms(between("allocation_assigned", "allocation_started")),
        "started_to_exited_ms": median_ms(between("allocation_started", "allocation_exited")),
        "exited_to_trial_ended_ms": median_ms([(b, a) for a, b in ended]),
        "trial_ended_to_next_requested_ms": median_ms(refill),
    }


def one_rep(cluster: BenchCluster, folder: Path, trials: int) -> dict[str, Any]:
    waited = wait_for_quiet()
    busy0 = busy_cpu_s()
    start = time.perf_counter()
    out = cluster.det("experiment", "create", str(folder / "config.yaml"), str(folder))
    experiment_id = created_experiment_id(out)
    state = wait_for_state(cluster.stub(), experiment_id, timeout=1800)
    wall_s = time.perf_counter() - start
    busy_cores = (busy_cpu_s() - busy0) / wall_s
    listed = cluster.det_json("experiment", "list-trials", str(experiment_id))
    completed = sum(1 for t in listed if t["state"] == "COMPLETED")
    return {
        "wall_s": round(wall_s, 3),
        "per_trial_s": round(wall_s / trials, 4),
        "trials_completed": completed,
        "machine_busy_cores": round(busy_cores, 3),
        "waited_for_quiet_s": round(waited, 1),
        **phases(cluster, experiment_id),
        "state": state,
        "experiment_id": experiment_id,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--fork-trials",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="trials start from the agent's warm fork server (cluster-up's default); "
        "--no-fork-trials: each a new process",
    )
    parser.add_argument(
        "--runtime",
        choices=("process", "docker"),
        default="process",
        help="cluster-up --runtime: docker runs each trial in a container of --image",
    )
    parser.add_argument("--image", default="", help="with --runtime docker: the trials' image")
    parser.add_argument("--trials", type=int, default=64)
    args = parser.parse_args()
    runs = []
    up_args = [] if args.fork_trials else ["--no-fork-trials"]
    if args.runtime == "docker":
        up_args = ["--runtime", "docker"]
    with local_cluster(cpu_slots=2, up_args=up_args) as cluster, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "train.py").write_text(TRAIN_PY)
        (folder / "config.yaml").write_text(config(args.trials, args.image))
        for rep in range(args.reps):
            run = one_rep(cluster, folder, args.trials)
            log(f"rep {rep + 1}/{args.reps}: {json.dumps(run)}")
            runs.append(run)
    emit("trial_overhead", runs)


if __name__ == "__main__":
    main()
