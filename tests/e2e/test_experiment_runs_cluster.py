"""det experiment wait | continue | cancel | logs against the session's local
cluster, through the real CLI: wait's exit code follows how the experiment
ended, a continued experiment's trial trains on from its checkpoint to the new
length, a canceled one's trial checkpoints and stops, and what makes no sense
is refused naming why."""

import textwrap
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, wait_for

pytestmark = pytest.mark.e2e

# Trains from its latest checkpoint (if any) up to searcher.max_length, `SLEEP_S`
# a step; stops early when asked (a cancel), checkpointing first either way.
TRAIN_PY = textwrap.dedent(
    """
    import logging
    import time

    import determined as det

    SLEEP_S = float(open("sleep_s.txt").read())
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    target = info.trial._config["searcher"]["max_length"]["batches"]
    with det.core.init() as core_context:
        steps = 0
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                steps = int((path / "steps").read_text())
            print("resumed from", steps, flush=True)
        while steps < target:
            steps += 10
            core_context.train.report_training_metrics(steps_completed=steps, metrics={"loss": 1.0 / steps})
            print("trained", steps, flush=True)
            if core_context.preempt.should_preempt():
                print("asked to stop", flush=True)
                break
            time.sleep(SLEEP_S)
        core_context.train.report_validation_metrics(steps_completed=steps, metrics={"loss": 1.0 / steps})
        with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, _):
            (path / "steps").write_text(str(steps))
    print("done at", steps, flush=True)
    """
)

CONFIG = textwrap.dedent(
    """
    name: runs
    entrypoint: python3 train.py
    searcher:
      name: single
      metric: loss
      max_length:
        batches: 30
    max_restarts: 0
    """
)


def context(folder: Path, sleep_s: float) -> Path:
    (folder / "train.py").write_text(TRAIN_PY)
    (folder / "sleep_s.txt").write_text(str(sleep_s))
    return folder


def wait(cluster: Cluster, experiment_id: int) -> tuple[int, str]:
    result = cluster.det("e", "wait", str(experiment_id), "--polling-interval", "0.5", check=False)
    return result.returncode, result.stdout.strip()


def test_wait_continue_and_logs(cluster: Cluster, tmp_path: Path) -> None:
    experiment_id = cluster.create(context(tmp_path, 0.0), CONFIG)
    assert wait(cluster, experiment_id) == (
        0,
        f"Experiment {experiment_id} ended COMPLETED: the search is done",
    )
    [trial] = cluster.trials(experiment_id)
    logs = cluster.det("e", "logs", str(experiment_id), "--tail", "1").stdout
    assert logs.splitlines()[-1].endswith("done at 30"), logs

    continued = cluster.det("e", "continue", str(experiment_id), "--config", "searcher.max_length.batches=50")
    assert continued.stdout.strip() == f"Continued experiment {experiment_id}"
    assert wait(cluster, experiment_id)[0] == 0
    logs = cluster.logs(trial["id"])
    assert "resumed from 30" in logs and "done at 50" in logs, logs
    described = cluster.json("e", "describe", str(experiment_id))
    assert [t["state"] for t in described["trials"]] == ["COMPLETED"]
    assert described["experiment"]["config"]["searcher"]["max_length"] == {"batches": 50}


def test_cancel_stops_the_trial_gracefully_and_wait_exits_1(cluster: Cluster, tmp_path: Path) -> None:
    experiment_id = cluster.create(context(tmp_path, 0.5), CONFIG.replace("batches: 30", "batches: 100000"))
    wait_for(
        lambda: (
            cluster.trials(experiment_id)
            and "trained 10" in cluster.logs(cluster.trials(experiment_id)[0]["id"])
        ),
        "the trial to train",
    )
    refused = cluster.det("e", "continue", str(experiment_id), check=False)
    assert refused.returncode == 1 and f"experiment {experiment_id} is ACTIVE" in refused.stderr, (
        refused.stderr
    )
    assert (
        cluster.det("e", "cancel", str(experiment_id)).stdout.strip()
        == f"Canceled experiment {experiment_id}"
    )
    assert wait(cluster, experiment_id) == (1, f"Experiment {experiment_id} ended CANCELED: canceled by user")
    [trial] = cluster.trials(experiment_id)
    assert trial["state"] == "CANCELED"
    assert "asked to stop" in cluster.logs(trial["id"])
    assert cluster.json("e", "lc", str(experiment_id)), "the stopped trial checkpointed"
    again = cluster.det("e", "cancel", str(experiment_id)).stdout.strip()
    assert again == f"Experiment {experiment_id} is already CANCELED: nothing to cancel"


def test_a_missing_experiment_is_not_found(cluster: Cluster) -> None:
    for verb in ("wait", "cancel", "continue", "logs"):
        result = cluster.det("e", verb, "999999", check=False)
        assert result.returncode == 1 and "999999" in result.stderr, (verb, result.stderr)
