"""Does a paused and resumed PyTorchTrial continue exactly where it stopped? Two trials of
examples/mnist_pytorch (const.yaml's hyperparameters, the same experiment seed, so the same
trial seed; OMP_NUM_THREADS=1), one run uninterrupted and one paused with
`det experiment pause` once it has trained `--pause-after` batches, then activated: it
resumes from the checkpoint the Trainer wrote when it stopped (models, optimizer, RNG states,
the data loader's position). Both report the training loss every batch.

Prints, per rep: where the trial stopped, how many batches were compared, the largest
absolute difference between the two losses at the same batch (expected: 0.0), and the first
batch where they differ, if any.

Starts its own cluster (2 CPU slots) in a temporary folder and stops it afterwards.
Usage: python bench/resume_fidelity.py [--reps 1] [--batches 200] [--pause-after 50]
"""

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import emit, log

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist_pytorch"


def config(batches: int, seed: int) -> str:
    document: dict[str, Any] = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    document["name"] = "resume-fidelity"
    document["entrypoint"] = f"python3 train.py --batches {batches} --reporting-period 1"
    document["environment"] = {"environment_variables": ["OMP_NUM_THREADS=1"]}
    document["reproducibility"] = {"experiment_seed": seed}
    document["max_restarts"] = 0
    return json.dumps(document)


def only_trial(cluster: BenchCluster, experiment_id: int) -> dict[str, Any]:
    while not (trials := cluster.det_json("experiment", "list-trials", str(experiment_id))):
        time.sleep(0.5)
    return dict(trials[0])


def losses(cluster: BenchCluster, trial_id: int) -> dict[int, float]:
    points = cluster.det_json("trial", "metrics", str(trial_id), "--group", "training")
    return {int(p["steps_completed"]): float(p["metrics"]["loss"]) for p in points}


def paused_and_resumed(cluster: BenchCluster, context: Path, pause_after: int) -> tuple[int, int]:
    """Creates the experiment, pauses it once its trial has trained `pause_after` batches,
    activates it once the trial has stopped; returns (trial id, batches at the stop)."""
    out = cluster.det("experiment", "create", str(context / "config.yaml"), str(context))
    experiment_id = created_experiment_id(out)
    stub = cluster.stub()
    trial = only_trial(cluster, experiment_id)
    while trial["total_batches"] < pause_after:
        time.sleep(0.2)
        trial = only_trial(cluster, experiment_id)
    cluster.det("experiment", "pause", str(experiment_id))
    while trial["state"] not in ("PAUSED", "COMPLETED", "ERROR"):
        time.sleep(0.2)
        trial = only_trial(cluster, experiment_id)
    if trial["state"] != "PAUSED":
        raise SystemExit(f"the trial ended {trial['state']} before the pause reached it: raise --batches")
    cluster.det("experiment", "activate", str(experiment_id))
    state = wait_for_state(stub, experiment_id, poll=0.5)
    if state != "COMPLETED":
        raise SystemExit(f"the resumed experiment {experiment_id} ended {state}")
    return int(trial["id"]), int(trial["total_batches"])


def one_rep(cluster: BenchCluster, context: Path, batches: int, pause_after: int) -> dict[str, Any]:
    out = cluster.det("experiment", "create", str(context / "config.yaml"), str(context))
    reference_experiment = created_experiment_id(out)
    if (state := wait_for_state(cluster.stub(), reference_experiment, poll=0.5)) != "COMPLETED":
        raise SystemExit(f"the uninterrupted experiment {reference_experiment} ended {state}")
    expected = losses(cluster, only_trial(cluster, reference_experiment)["id"])
    trial_id, stopped_at = paused_and_resumed(cluster, context, pause_after)
    got = losses(cluster, trial_id)
    common = sorted(set(expected) & set(got))
    differences = [abs(got[b] - expected[b]) for b in common]
    differing = [b for b, d in zip(common, differences, strict=True) if d]
    return {
        "max_abs_difference": max(differences, default=float("nan")),
        "batches_compared": len(common),
        "batches_missing": len(set(expected) ^ set(got)),
        "stopped_at_batch": stopped_at,
        "first_differing_batch": differing[0] if differing else None,
        "loss_at_stop": expected.get(stopped_at),
        "final_loss": expected.get(batches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--pause-after", type=int, default=50)
    parser.add_argument(
        "--seed", type=int, default=7, help="the experiments' reproducibility.experiment_seed"
    )
    args = parser.parse_args()
    runs = []
    with local_cluster(cpu_slots=2) as cluster, tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp) / "mnist_pytorch"
        shutil.copytree(EXAMPLE, context, ignore=shutil.ignore_patterns("data", "__pycache__"))
        (context / "config.yaml").write_text(config(args.batches, args.seed))
        for rep in range(args.reps):
            run = one_rep(cluster, context, args.batches, args.pause_after)
            log(f"rep {rep + 1}/{args.reps}: {json.dumps(run)}")
            runs.append(run)
    emit("resume_fidelity", runs)


if __name__ == "__main__":
    main()
