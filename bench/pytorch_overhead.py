"""What Determined's PyTorch Trainer costs a training loop: the same model and data
(examples/mnist_pytorch with const.yaml's hyperparameters, on its generated MNIST-format
set), trained by a plain torch loop and by `MNistTrial` under `det.pytorch.Trainer` in a
trial on a local cluster; batches per second each, and how much slower the Trainer is.

Both measure the same window, from batch `--batches / 10` to `--batches`, so start-up, the
first epoch's data generation and the final validation/checkpoint are outside it:
- the Trainer: the `reported_at` stamps (taken in the trial when it reports) of its training
  metrics at those batches (`--reporting-period`: reports, metric averaging and the
  preemption check happen at these boundaries only);
- the plain loop: `time.perf_counter()` at the same batches, in a subprocess started with
  the same environment (OMP_NUM_THREADS) while the cluster is up and idle.
The plain loop shuffles with torch's own DataLoader; the Trainer with det.pytorch.DataLoader.
Reps alternate plain and Trainer runs; the figures are medians.

With --gpu both train on the GPU: the plain loop on cuda:0 (synchronised before each
stamp), the trial with `resources.slots_per_trial: 1` on the agent's GPU slot.

Starts its own cluster (2 CPU slots, or this machine's GPUs with --gpu) in a temporary
folder and stops it afterwards.
Usage: python bench/pytorch_overhead.py [--reps 3] [--batches 1000] [--threads 1] [--gpu]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import emit, log, wait_for_quiet

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mnist_pytorch"


def plain_loop(batches: int, first: int, gpu: bool) -> float:
    """Batches/s of a plain torch loop over batches first+1..batches (run in a subprocess,
    with cwd a scratch folder: the data set is written under ./data)."""
    import torch

    sys.path.insert(0, str(EXAMPLE))
    import data  # type: ignore[import-not-found]
    from model_def import build_model  # type: ignore[import-not-found]

    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    hparams = config["hyperparameters"]
    torch.manual_seed(0)
    model = build_model(
        hparams["n_filters1"], hparams["n_filters2"], hparams["dropout1"], hparams["dropout2"]
    )
    device = torch.device("cuda:0" if gpu else "cpu")
    model = model.to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=hparams["learning_rate"])
    dataset = data.get_dataset("data", train=True, data_config=config["data"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=hparams["global_batch_size"], shuffle=True)
    model.train()
    trained, started = 0, 0.0
    while trained < batches:
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = torch.nn.functional.nll_loss(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            trained += 1
            if trained == first:
                _synchronize(gpu)
                started = time.perf_counter()
            if trained == batches:
                break
    _synchronize(gpu)
    return (batches - first) / (time.perf_counter() - started)


def _synchronize(gpu: bool) -> None:
    """Waits for the GPU's queued work, so that a stamp counts it."""
    if gpu:
        import torch

        torch.cuda.synchronize()


def run_plain(batches: int, first: int, threads: int, gpu: bool) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run(
            [sys.executable, __file__, "--plain-loop", str(batches), str(first), str(int(gpu))],
            env=env, cwd=scratch, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    return float(out.strip().splitlines()[-1])


def trainer_config(batches: int, reporting_period: int, threads: int, gpu: bool) -> str:
    document: dict[str, Any] = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    document["name"] = "pytorch-overhead"
    document["entrypoint"] = f"python3 train.py --batches {batches} --reporting-period {reporting_period}"
    document["environment"] = {"environment_variables": [f"OMP_NUM_THREADS={threads}"]}
    document["max_restarts"] = 0
    if gpu:
        document["resources"] = {"slots_per_trial": 1}
    return json.dumps(document)


def run_trainer(cluster: BenchCluster, context: Path, batches: int, first: int) -> dict[str, Any]:
    out = cluster.det("experiment", "create", str(context / "config.yaml"), str(context))
    experiment_id = created_experiment_id(out)
    # Poll rarely: each poll costs the 2 cores the trial trains on.
    state = wait_for_state(cluster.stub(), experiment_id, timeout=1800, poll=1.0)
    [trial] = cluster.det_json("experiment", "list-trials", str(experiment_id))
    points = cluster.det_json("trial", "metrics", str(trial["id"]), "--group", "training")
    stamps = {int(p["steps_completed"]): int(p["reported_at_ns"]) for p in points}
    if state != "COMPLETED" or first not in stamps or batches not in stamps:
        raise SystemExit(f"experiment {experiment_id} ended {state}; training reports at {sorted(stamps)}")
    seconds = (stamps[batches] - stamps[first]) / 1e9
    return {"trainer_batches_per_s": (batches - first) / seconds, "experiment_id": experiment_id}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--reporting-period", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of both loops")
    parser.add_argument("--gpu", action="store_true", help="train on this machine's GPU (both loops)")
    parser.add_argument("--plain-loop", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        batches, first, gpu = args.plain_loop
        print(plain_loop(batches, first, bool(gpu)))
        return
    first = args.batches // 10
    if first % args.reporting_period or args.batches % args.reporting_period:
        raise SystemExit("--batches and --batches/10 must be multiples of --reporting-period")
    runs = []
    with local_cluster(cpu_slots=2, gpu=args.gpu) as cluster, tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp) / "mnist_pytorch"
        shutil.copytree(EXAMPLE, context, ignore=shutil.ignore_patterns("data", "__pycache__"))
        (context / "config.yaml").write_text(
            trainer_config(args.batches, args.reporting_period, args.threads, args.gpu)
        )
        for rep in range(args.reps):
            wait_for_quiet()
            plain = run_plain(args.batches, first, args.threads, args.gpu)
            wait_for_quiet()
            trainer = run_trainer(cluster, context, args.batches, first)
            run = {
                "plain_batches_per_s": round(plain, 2),
                "trainer_batches_per_s": round(trainer["trainer_batches_per_s"], 2),
                "trainer_slower_pct": round(100 * (1 - trainer["trainer_batches_per_s"] / plain), 2),
                "batches_timed": args.batches - first,
                "threads": args.threads,
                "device": "cuda" if args.gpu else "cpu",
                "experiment_id": trainer["experiment_id"],
            }
            log(f"rep {rep + 1}/{args.reps}: {json.dumps(run)}")
            runs.append(run)
    emit("pytorch_overhead", runs)


if __name__ == "__main__":
    main()
