"""Records tests/golden/adaptive_pause_kill.jsonl from a real local cluster:

1. an `async_halving` search (2 rungs at 4 and 16 batches, 4 trials, 2 at a time) whose
   trials are cut at the first rung or run to the top one;
2. a `single` trial that is paused mid-run (it checkpoints and exits), then activated
   (it resumes from its checkpoint) and completes;
3. a `random` search of two trials, one of which a user kills with `det trial kill`.

Run from the repository root: `python tests/golden/record_adaptive_pause_kill.py`. It
also writes must_fail_changed_stop.jsonl: the same log with one searcher stop moved to
another trial, which today's searcher would never decide.
"""

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GOLDEN.parent))

from support.e2e_cluster import Cluster, started_cluster, wait_for  # noqa: E402 - after the path insert

TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    info = det.get_cluster_info()
    x = info.trial.hparams["x"]
    start = 0
    with det.core.init() as core_context:
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                start = int((path / "batch").read_text())
        for batch in range(start + 1, 17):
            time.sleep(0.25)
            core_context.train.report_training_metrics(steps_completed=batch, metrics={"loss": x})
            if batch % 4 == 0:
                core_context.train.report_validation_metrics(
                    steps_completed=batch, metrics={"x": x, "batches": batch}
                )
            if core_context.preempt.should_preempt():
                with core_context.checkpoint.store_path({"steps_completed": batch}) as (path, _):
                    (path / "batch").write_text(str(batch))
                break
    """
)


def config(name: str, searcher: dict[str, object]) -> str:
    return json.dumps(
        {
            "name": name,
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "int", "minval": 1, "maxval": 1000}},
            "searcher": {"metric": "x", **searcher},
            "reproducibility": {"experiment_seed": 7},
            "max_restarts": 0,
            "preemption_timeout": 30,
        }
    )


def ended(cluster: Cluster, experiment_id: int) -> None:
    wait_for(lambda: cluster.experiment_state(experiment_id) in ("COMPLETED", "CANCELED"), "the end", 180)


def record(cluster: Cluster, context: Path) -> None:
    (context / "train.py").write_text(TRAIN_PY)
    asha = {"name": "async_halving", "num_rungs": 2, "max_trials": 4, "max_concurrent_trials": 2,
            "time_metric": "batches", "max_time": 16}  # fmt: skip
    ended(cluster, cluster.create(context, config("asha", asha)))

    paused = cluster.create(context, config("paused", {"name": "single"}))
    [trial] = wait_for(lambda: cluster.trials(paused), "the trial")
    wait_for(
        lambda: cluster.json("trial", "describe", str(trial["id"]))["trial"]["total_batches"] >= 3, "batches"
    )
    cluster.det("experiment", "pause", str(paused))
    wait_for(lambda: cluster.trials(paused)[0]["state"] == "PAUSED", "the trial to stop")
    cluster.det("experiment", "activate", str(paused))
    ended(cluster, paused)

    killed = cluster.create(context, config("killed", {"name": "random", "max_trials": 2}))
    trials = wait_for(lambda: len(cluster.trials(killed)) == 2 and cluster.trials(killed), "two trials")
    cluster.det("trial", "kill", str(trials[0]["id"]))
    ended(cluster, killed)


def main() -> None:
    with started_cluster("det-golden") as cluster, tempfile.TemporaryDirectory() as context:
        record(cluster, Path(context))
        log = subprocess.run(
            [sys.executable, "-m", "services.eventlog", "--nats-url", f"nats://127.0.0.1:{cluster.nats_port}",
             "--credentials", str(cluster.data_dir / "credentials.json")],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    (GOLDEN / "adaptive_pause_kill.jsonl").write_text(log)
    (GOLDEN / "must_fail_changed_stop.jsonl").write_text(changed_stop(log))


def changed_stop(log: str) -> str:
    """The log with its first searcher stop made about the trial created after it."""
    lines = [json.loads(line) for line in log.splitlines()]
    stop = next(line for line in lines if "trial_stop_requested" in line)
    trial_ids = sorted(int(line["trial_created"]["trial_id"]) for line in lines if "trial_created" in line)
    other = str(max(trial_ids))
    stop["trial_stop_requested"]["trial_id"] = other
    stop["event_id"] = f"trial-stop-{other}"
    stop["aggregate"] = f"trial/{other}"
    return "".join(json.dumps(line) + "\n" for line in lines)


if __name__ == "__main__":
    main()
