"""The chaos suite (issue 7): each part of a running local cluster is killed with SIGKILL
in the middle of a multi-trial experiment whose script checkpoints; the supervisor brings it
back with no user action, and then

- the experiment ends COMPLETED;
- every reported training step is visible exactly once (the read models' non-superseded points);
- the read models equal a fresh rebuild from the log;
- no process is left after `cluster-down` (checked once, when the module's cluster goes down).

Plus a 30 s outage of nats-server and of PostgreSQL (held down by the supervisor), through
which nothing is lost and the gateway stays up.
"""

import json
import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chaos_checks import (
    cluster_processes,
    part_status,
    read_models_match_rebuild,
    training_steps,
    wait_until_restarted,
)
from support.e2e_cluster import Cluster, det, started_cluster, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.chaos]

STEPS = 40
TRIALS = 3
OUTAGE_S = 30.0

TRAIN_PY = textwrap.dedent(
    f"""
    import json, time
    import determined as det

    info = det.get_cluster_info()
    with det.core.init() as core_context:
        start = 0
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                start = json.loads((path / "state.json").read_text())["step"]
        for step in range(start + 1, {STEPS} + 1):
            time.sleep(0.1)
            core_context.train.report_training_metrics(steps_completed=step, metrics={{"loss": 1.0 / step}})
            if step % 10 == 0:
                with core_context.checkpoint.store_path({{"steps_completed": step}}) as (path, _):
                    (path / "state.json").write_text(json.dumps({{"step": step}}))
                if core_context.preempt.should_preempt():
                    raise SystemExit(0)
        core_context.train.report_validation_metrics(
            steps_completed={STEPS}, metrics={{"validation_loss": info.trial.hparams["x"]}}
        )
    """
)


def config(name: str) -> str:
    return json.dumps(
        {
            "name": name,
            "entrypoint": "python3 train.py",
            "hyperparameters": {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
            "searcher": {
                "name": "random",
                "metric": "validation_loss",
                "max_trials": TRIALS,
                "max_concurrent_trials": 2,
            },
            "max_restarts": 5,
        }
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-chaos") as running:
        yield running
        status = json.loads((running.data_dir / "run" / "status.json").read_text())
        pids = {part["pid"] for part in status["parts"] if part["pid"]} | {status["supervisor_pid"]}
        running.down()
        leftovers = cluster_processes(running.data_dir, pids)
        assert not leftovers, f"processes left after cluster-down: {leftovers}"


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN_PY)
    return tmp_path


def _start_experiment(cluster: Cluster, context: Path, name: str) -> int:
    experiment_id = cluster.create(context, config(name))
    wait_for(lambda: _steps_reported(cluster, experiment_id) >= 5, "the first trials to report", 120)
    return experiment_id


def _steps_reported(cluster: Cluster, experiment_id: int) -> int:
    try:
        return len(
            cluster.query(
                "SELECT 1 FROM read_model.metrics m JOIN read_model.trials t ON t.id = m.trial_id WHERE t.experiment_id = $1",
                experiment_id,
            )
        )
    except OSError:
        return 0


def _check_the_experiment(cluster: Cluster, experiment_id: int) -> None:
    wait_for(
        lambda: cluster.experiment_state(experiment_id) in ("COMPLETED", "ERROR"),
        "the experiment to end",
        240,
    )
    assert cluster.experiment_state(experiment_id) == "COMPLETED"
    trials = cluster.trials(experiment_id)
    assert len(trials) == TRIALS
    for trial in trials:
        assert training_steps(cluster, trial["id"]) == list(range(1, STEPS + 1)), trial
    assert read_models_match_rebuild(cluster)


PARTS = ["gateway", "scheduler", "searcher", "agent", "checkpoint", "nats-server", "postgres"]


@pytest.mark.parametrize("part", PARTS)
def test_a_killed_part_comes_back_and_nothing_is_lost(cluster: Cluster, context_dir: Path, part: str) -> None:
    experiment_id = _start_experiment(cluster, context_dir, f"chaos-{part}")
    before = part_status(cluster.data_dir, part)
    os.kill(before["pid"], signal.SIGKILL)
    after = wait_until_restarted(cluster.data_dir, part, before)
    assert after["restarts"] == before["restarts"] + 1
    assert after["last_error"], "the supervisor records why the part stopped"
    _check_the_experiment(cluster, experiment_id)


@pytest.mark.parametrize("part", ["nats-server", "postgres"])
def test_an_outage_of_30_s_loses_nothing(cluster: Cluster, context_dir: Path, part: str) -> None:
    experiment_id = _start_experiment(cluster, context_dir, f"outage-{part}")
    gateway_pid = part_status(cluster.data_dir, "gateway")["pid"]
    cluster.det("deploy", "local", "stop-service", part, "--data-dir", str(cluster.data_dir))
    down_since = time.monotonic()
    # Asked once, without waiting the outage out (DET_CLI_WAIT_S=0): the outage stays OUTAGE_S long.
    answer = det(dict(cluster.env, DET_CLI_WAIT_S="0"), "experiment", "describe", str(experiment_id))
    if part == "postgres":
        assert answer.returncode == 1 and "read models unavailable" in answer.stderr, answer
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_since)))
    assert part_status(cluster.data_dir, "gateway")["pid"] == gateway_pid, "the gateway stayed up"
    cluster.det("deploy", "local", "start-service", part, "--data-dir", str(cluster.data_dir))
    _check_the_experiment(cluster, experiment_id)
    assert part_status(cluster.data_dir, "gateway")["pid"] == gateway_pid


def test_status_shows_every_part(cluster: Cluster) -> None:
    status: dict[str, Any] = json.loads(
        cluster.det("deploy", "local", "status", "--data-dir", str(cluster.data_dir), "--json").stdout
    )
    names = {part["name"] for part in status["parts"]}
    assert names == set(PARTS)
    assert all(part["state"] == "running" for part in status["parts"]), status
