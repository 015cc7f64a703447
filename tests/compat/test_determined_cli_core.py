"""Determined 0.38.1's own `det` and SDK, unchanged, against a local cluster's HTTP API: users,
the cluster's views and the everyday experiment verbs (issue 22 §1; trials, logs and
checkpoints are test_determined_cli_trials.py's)."""

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.determined_client import DeterminedCluster
from support.e2e_cluster import wait_for

pytestmark = pytest.mark.e2e

TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    with det.core.init() as core_context:
        for step in range(1, 4):
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
        core_context.train.report_validation_metrics(steps_completed=3, metrics={"loss": 0.25})
    print("training done", flush=True)
    """
)
# Runs until told to stop: a pause is quick.
WAIT_PY = textwrap.dedent(
    """
    import time
    import determined as det

    with det.core.init() as core_context:
        while not core_context.preempt.should_preempt():
            time.sleep(0.1)
    """
)
CONFIG = textwrap.dedent(
    """
    name: {name}
    entrypoint: {entrypoint}
    hyperparameters:
      learning_rate: 0.1
    searcher:
      name: single
      metric: loss
    max_restarts: 0
    """
)


def context(home: Path, name: str, entrypoint: str = "python3 train.py") -> Path:
    """A model definition folder with its config: its det sends them as Determined sends them."""
    folder = home / name
    folder.mkdir()
    (folder / "train.py").write_text(TRAIN_PY)
    (folder / "wait.py").write_text(WAIT_PY)
    (folder / "config.yaml").write_text(CONFIG.format(name=name, entrypoint=entrypoint))
    return folder


def create(client: DeterminedCluster, name: str, *flags: str, entrypoint: str = "python3 train.py") -> str:
    folder = context(client.home, name, entrypoint)
    return client.det("experiment", "create", str(folder / "config.yaml"), str(folder), *flags)


def created_id(output: str) -> int:
    line = next(line for line in output.splitlines() if line.startswith("Created experiment "))
    return int(line.split()[-1])


def described(client: DeterminedCluster, experiment_id: int) -> dict[str, Any]:
    """Its `det e describe N --json`: Determined's GetExperimentResponse."""
    [answer] = json.loads(client.det("experiment", "describe", str(experiment_id), "--json"))
    return dict(answer)


def state(client: DeterminedCluster, experiment_id: int) -> str:
    return str(client.rest(f"/api/v1/experiments/{experiment_id}")["experiment"]["state"])


def test_a_user_logs_in_and_out(determined_cluster: DeterminedCluster) -> None:
    password = determined_cluster.cluster.password + "\n"
    logged_in = determined_cluster.det_run("user", "login", "admin", user="", stdin=password)
    assert logged_in.returncode == 0, logged_in.stderr
    assert "You are logged in as user 'admin'" in determined_cluster.det("user", "whoami", user="")
    determined_cluster.det("user", "logout", user="")
    after = determined_cluster.det_run("user", "whoami", user="")
    assert after.returncode != 0 and "Unauthenticated" in after.stdout + after.stderr
    refused = determined_cluster.det_run("user", "login", "admin", user="", stdin="not-it\n")
    assert refused.returncode != 0 and "Invalid username/password" in refused.stdout + refused.stderr


def test_the_cluster_and_its_users_are_shown(determined_cluster: DeterminedCluster) -> None:
    master = json.loads(determined_cluster.det("master", "info", "--json"))
    assert master["clusterId"] and master["version"]
    agents = determined_cluster.det("agent", "list")
    assert "default" in agents and "True" in agents  # its pool; enabled
    assert "Slots (acquired/needed)" in determined_cluster.det("job", "list")
    users = determined_cluster.det("user", "list")
    assert "admin" in users and "determined" in users


def test_the_master_logs_are_read_by_an_admin(determined_cluster: DeterminedCluster) -> None:
    lines = determined_cluster.det("master", "logs", "--tail", "3").splitlines()
    assert len(lines) == 3 and all("]: " in line for line in lines), lines
    refused = determined_cluster.det_run("master", "logs", user="determined")
    assert refused.returncode != 0 and "needs an admin" in refused.stdout + refused.stderr


def test_an_experiment_is_created_followed_listed_and_described(
    determined_cluster: DeterminedCluster,
) -> None:
    output = create(determined_cluster, "compat-first", "--follow-first-trial")
    experiment_id = created_id(output)
    assert "training done" in output  # -f follows the first trial's logs
    sdk = determined_cluster.sdk(
        f"""
        import os
        from determined.experimental import client
        client.login(os.environ["DET_MASTER"], "admin", os.environ["DET_PASS"])
        experiment = client.get_experiment({experiment_id})
        print(experiment.wait(interval=0.2).value)
        print(experiment.config["searcher"]["metric"])
        print([e.id for e in client.list_experiments()])
        """
    ).split("\n")
    assert sdk[:2] == ["STATE_COMPLETED", "loss"] and str(experiment_id) in sdk[2]
    listed = determined_cluster.det("experiment", "list")
    assert f"{experiment_id} | admin" in listed and "compat-first" in listed and "COMPLETED" in listed
    answer = described(determined_cluster, experiment_id)
    assert answer["experiment"]["name"] == "compat-first" and answer["config"]["searcher"]["name"] == "single"
    shown = determined_cluster.det("experiment", "describe", str(experiment_id))
    assert "compat-first" in shown and "Workloads:" in shown
    trials = determined_cluster.det("experiment", "list-trials", str(experiment_id))
    assert "COMPLETED" in trials and "learning_rate" in trials
    determined_cluster.det("experiment", "archive", str(experiment_id))  # its list asks archived=false
    assert "compat-first" not in determined_cluster.det("experiment", "list")
    assert "compat-first" in determined_cluster.det("experiment", "list", "--all")


def test_an_experiment_is_paused_activated_and_killed(determined_cluster: DeterminedCluster) -> None:
    experiment_id = created_id(create(determined_cluster, "compat-sleeper", entrypoint="python3 wait.py"))
    job = f"experiment/{experiment_id}"
    wait_for(lambda: job in str(determined_cluster.rest("/api/v1/job-queues-v2")), "its job in the queue")
    assert job in determined_cluster.det("job", "list")
    determined_cluster.det("experiment", "pause", str(experiment_id))
    wait_for(lambda: state(determined_cluster, experiment_id) == "STATE_PAUSED", "paused")
    determined_cluster.det("experiment", "activate", str(experiment_id))
    wait_for(lambda: state(determined_cluster, experiment_id) == "STATE_ACTIVE", "active again")
    determined_cluster.det("experiment", "kill", str(experiment_id))
    ended = determined_cluster.sdk(
        f"""
        from determined.experimental import client
        print(client.get_experiment({experiment_id}).wait(interval=0.2).value)
        """
    )
    assert ended.strip() == "STATE_CANCELED"
    determined_cluster.det("experiment", "delete", str(experiment_id), "--yes")

    def listed() -> list[int]:
        return [e["id"] for e in determined_cluster.rest("/api/v1/experiments")["experiments"]]

    wait_for(lambda: experiment_id not in listed(), "the experiment deleted")


def test_a_missing_experiment_is_refused(determined_cluster: DeterminedCluster) -> None:
    for verb in ("describe", "kill"):
        refused = determined_cluster.det_run("experiment", verb, "999999")
        assert refused.returncode != 0 and "experiment 999999 not found" in refused.stdout + refused.stderr
