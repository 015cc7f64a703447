"""Adaptive ASHA on a small real model, against Ray Tune's ASHA on the same work
(the peers' ray_tune_digits.py): a torch MLP on scikit-learn's bundled digits, 16 trials,
up to 20 epochs, divisor 4, lr log-uniform [1e-4, 1e-1], hidden in {32, 64, 128, 256},
two trials at a time on 2 CPU slots, one torch thread a trial.

The trial script and config are bench/asha_digits/ (train.py, adaptive.yaml), written as a
Determined user writes them with the Core API. Per rep: the wall time from invoking
`det experiment create` to the experiment being COMPLETED, the epochs trained by all trials
together, and the best validation accuracy any trial reported (read from the event log's
validation reports, as Ray's figure is the best over every reported epoch).

Needs torch and scikit-learn in the environment the cluster's trials run in (this venv):
`pip install torch==2.13.0 scikit-learn`. Starts its own cluster (2 CPU slots) in a temporary
folder and stops it afterwards.

Usage: python bench/asha_digits.py [--reps 1] [--seed 0]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _cluster import BenchCluster, created_experiment_id, local_cluster, wait_for_state
from _report import busy_cpu_s, emit, log, wait_for_quiet

CONTEXT = Path(__file__).resolve().parent / "asha_digits"


def stop_chain(
    events: list[dict[str, Any]], experiment_id: int, epochs_by_trial: dict[int, int]
) -> dict[str, Any]:
    """How long ASHA takes to stop a trial, from the event log (medians, ms): the trial's
    report call (the validation's reported_at_ns) -> its TrialValidationReported appended ->
    the searcher's TrialStopRequested (whose cause is that validation) -> the lifecycle's
    AllocationStopRequested; the epochs trials trained past the validation that cut them
    (the stop reaches should_preempt() while the next epoch is training); and from a trial's
    last validation report to its allocation's exit."""
    by_id = {e["event_id"]: e for e in events}
    report_to_appended, to_trial_stop, to_alloc_stop, whole = [], [], [], []
    extra_epochs = 0
    trial_stop_at: dict[int, tuple[int, int]] = {}  # trial -> (occurred_at_ns, reported_at_ns)
    for e in events:
        if "trial_validation_reported" in e:
            v = e["trial_validation_reported"]
            if int(v.get("experiment_id", 0)) == experiment_id and "reported_at_ns" in v:
                report_to_appended.append(int(e["occurred_at_ns"]) - int(v["reported_at_ns"]))
        elif (
            "trial_stop_requested" in e
            and int(e["trial_stop_requested"].get("experiment_id", 0)) == experiment_id
        ):
            cause = by_id.get(e.get("causation_id", ""))
            for _ in range(3):  # a Stop decided with a Create names the TrialCreated as its cause
                if cause is None or "trial_validation_reported" in cause:
                    break
                cause = by_id.get(cause.get("causation_id", ""))
            if cause and "trial_validation_reported" in cause:
                v = cause["trial_validation_reported"]
                trial = int(e["trial_stop_requested"]["trial_id"])
                to_trial_stop.append(int(e["occurred_at_ns"]) - int(cause["occurred_at_ns"]))
                trial_stop_at[trial] = (int(e["occurred_at_ns"]), int(v.get("reported_at_ns", 0)))
                cut_at = int(json.loads(v["metrics_json"])["epochs"])
                extra_epochs += max(0, epochs_by_trial.get(trial, cut_at) - cut_at)
    for e in events:
        if "allocation_stop_requested" in e:
            trial = int(e["allocation_stop_requested"]["allocation_id"].split(".")[0])
            if trial in trial_stop_at:
                stop_at, reported_at = trial_stop_at.pop(trial)
                to_alloc_stop.append(int(e["occurred_at_ns"]) - stop_at)
                if reported_at:
                    whole.append(int(e["occurred_at_ns"]) - reported_at)

    last_report: dict[int, int] = {}
    for e in events:
        v = e.get("trial_validation_reported")
        if v and int(v.get("experiment_id", 0)) == experiment_id and "reported_at_ns" in v:
            last_report[int(v["trial_id"])] = max(
                last_report.get(int(v["trial_id"]), 0), int(v["reported_at_ns"])
            )
    report_to_exited = [
        int(e["occurred_at_ns"]) - last_report[int(e["allocation_exited"]["allocation_id"].split(".")[0])]
        for e in events
        if "allocation_exited" in e
        and int(e["allocation_exited"]["allocation_id"].split(".")[0]) in last_report
    ]

    def median_ms(values: list[int]) -> float | None:
        return round(statistics.median(values) / 1e6, 2) if values else None

    return {
        "report_to_validation_appended_ms": median_ms(report_to_appended),
        "validation_to_trial_stop_ms": median_ms(to_trial_stop),
        "trial_stop_to_allocation_stop_ms": median_ms(to_alloc_stop),
        "report_to_allocation_stop_ms": median_ms(whole),
        "epochs_past_the_cut": extra_epochs,
        # checkpoint, core_context close, interpreter exit (torch's teardown), agent sees it
        "last_report_to_exited_ms": median_ms(report_to_exited),
    }


def one_rep(cluster: BenchCluster, seed: int, mode: str) -> dict[str, Any]:
    waited = wait_for_quiet()
    busy0 = busy_cpu_s()
    start = time.perf_counter()
    out = cluster.det(
        "experiment",
        "create",
        str(CONTEXT / "adaptive.yaml"),
        str(CONTEXT),
        "--config",
        f"reproducibility.experiment_seed={seed}",
        "--config",
        f"searcher.mode={mode}",
    )
    experiment_id = created_experiment_id(out)
    state = wait_for_state(cluster.stub(), experiment_id, timeout=1800)
    wall_s = time.perf_counter() - start
    busy_cores = (busy_cpu_s() - busy0) / wall_s

    described = cluster.det_json("experiment", "describe", str(experiment_id))
    trials = cluster.det_json("experiment", "list-trials", str(experiment_id))
    events = cluster.events("validation", "trial", "allocation")
    validations = [
        e["trial_validation_reported"]
        for e in events
        if "trial_validation_reported" in e
        and int(e["trial_validation_reported"].get("experiment_id", 0)) == experiment_id
    ]
    epochs_by_trial: dict[int, int] = {}
    best = None
    for v in validations:
        metrics = json.loads(v["metrics_json"])
        trial_id = int(v["trial_id"])
        epochs_by_trial[trial_id] = max(epochs_by_trial.get(trial_id, 0), int(metrics["epochs"]))
        if best is None or metrics["accuracy"] > best:
            best = metrics["accuracy"]
    best_by_trial: dict[int, float] = {}
    for v in validations:
        trial_id, accuracy = int(v["trial_id"]), json.loads(v["metrics_json"])["accuracy"]
        best_by_trial[trial_id] = max(best_by_trial.get(trial_id, 0.0), accuracy)
    for t in sorted(trials, key=lambda t: t["id"]):
        hp = t["hparams"]
        log(
            f"trial {t['id']}: lr {hp['lr']:.2e} hidden {hp['hidden']:>3}: {epochs_by_trial.get(t['id'], 0):>2} "
            f"epochs, best accuracy {best_by_trial.get(t['id'], 0.0):.4f}; {t['state']} ({t.get('end_reason', '')})"
        )
    trial_states: dict[str, int] = {}
    for t in trials:
        trial_states[t["state"]] = trial_states.get(t["state"], 0) + 1
    result = {
        "wall_s": round(wall_s, 3),
        "total_epochs": sum(epochs_by_trial.values()),
        "best_accuracy": best,
        "trials": len(trials),
        "restarts": sum(t["restarts"] for t in trials),
        "runs_total": sum(t.get("runs", 0) for t in trials),
        "checkpoints": sum(t["num_checkpoints"] for t in trials),
        "machine_busy_cores": round(busy_cores, 3),
        "waited_for_quiet_s": round(waited, 1),
        "seed": seed,
        "state": state,
        "end_reason": described["experiment"].get("end_reason", ""),
        "trial_states": trial_states,
        **stop_chain(events, experiment_id, epochs_by_trial),
        "epochs_per_trial": sorted(epochs_by_trial.values(), reverse=True),
        "experiment_id": experiment_id,
    }
    if state != "COMPLETED":
        result["trial_end_reasons"] = [t.get("end_reason", "") for t in trials]
    for t in trials:  # show why a trial failed: the figure is not worth much otherwise
        if t["restarts"] or t["state"] != "COMPLETED":
            logs = cluster.det("trial", "logs", str(t["id"])).splitlines()
            log(
                f"trial {t['id']} {t['state']} ({t.get('end_reason', '')}), {t['restarts']} restarts; "
                f"the end of its logs:\n" + "\n".join(logs[-25:])
            )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument(
        "--fork-trials",
        action="store_true",
        help="cluster-up --fork-trials: trials start from the agent's warm fork server",
    )
    parser.add_argument("--seed", type=int, default=0, help="reproducibility.experiment_seed")
    parser.add_argument(
        "--mode",
        default="standard",
        choices=["aggressive", "standard", "conservative"],
        help="searcher.mode: aggressive is one bracket, the shape of Ray's ASHA",
    )
    parser.add_argument(
        "--vary-seed", action="store_true", help="rep i uses seed + i (default: the same seed)"
    )
    args = parser.parse_args()
    try:
        import sklearn  # noqa: F401
        import torch  # noqa: F401
    except ImportError as error:
        sys.exit(f"{error}: the trials need torch and scikit-learn (pip install torch==2.13.0 scikit-learn)")
    runs = []
    up_args = ["--fork-trials", "--preload", "torch,sklearn.datasets"] if args.fork_trials else []
    with local_cluster(cpu_slots=2, up_args=up_args) as cluster:
        for rep in range(args.reps):
            run = one_rep(cluster, args.seed + rep if args.vary_seed else args.seed, args.mode)
            log(f"rep {rep + 1}/{args.reps}: {json.dumps(run)}")
            runs.append(run)
    emit("asha_digits", runs)


if __name__ == "__main__":
    main()
