"""Restarting one service of a running local cluster, end to end (issue 2):

- the gateway, while a trial reports metrics: the harness's shipper retries until the new
  gateway listens, and every report is stored exactly once (in the log and in Postgres);
- the scheduler and the searcher, while an experiment's trials run one after the other:
  each rebuilds its state from the log and the search carries on to its end;
- the agent, while a trial runs: the allocation is closed as "agent restarted" and the
  trial runs again on the new agent process.

Services are restarted with `det deploy local restart-service`, as an operator would.
"""

import json
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, started_cluster, wait_for

from deploy.local.cluster import ClusterRecord

pytestmark = pytest.mark.e2e

REPORTS = 3000
METRICS_PER_REPORT = 10

# Reports REPORTS training metrics, pausing every 100 so that the run lasts a few seconds
# and the shipper sends many batches; says when half are queued. The second half trickles
# until the file named by the `gate` hyperparameter exists (the test makes it once it has
# restarted the gateway), so that the restart always meets reports being sent, however
# long it takes on a busy machine.
REPORTING_TRAIN_PY = textwrap.dedent(
    f"""
    import logging, os, time
    import determined as det

    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    gate = det.get_cluster_info().trial.hparams["gate"]
    with det.core.init() as core_context:
        for step in range(1, {REPORTS} + 1):
            metrics = {{f"m{{i}}": step + i / 10 for i in range({METRICS_PER_REPORT})}}
            core_context.train.report_training_metrics(steps_completed=step, metrics=metrics)
            if step == {REPORTS} // 2:
                print("half of the reports sent", flush=True)
            if step % 100 == 0:
                time.sleep(0.2)
            if step > {REPORTS} // 2 and not os.path.exists(gate):
                time.sleep(0.05)
    print("reporting done", flush=True)
    """
)

SHORT_TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    info = det.get_cluster_info()
    print("trial", info.trial.trial_id, "x", info.trial.hparams["x"], flush=True)
    with det.core.init() as core_context:
        time.sleep(2)
        core_context.train.report_validation_metrics(
            steps_completed=1, metrics={"validation_loss": 1.0 / info.trial.hparams["x"]}
        )
    """
)

SLEEPING_TRAIN_PY = "import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n"


def config(name: str, **overrides: Any) -> str:
    document: dict[str, Any] = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {"global_batch_size": 32},
        "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 10}},
        "max_restarts": 0,
    }
    document.update(overrides)
    return json.dumps(document)  # JSON is YAML


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A cluster of this module's own: its services are restarted under it."""
    with started_cluster("det-e2e-restarts") as running:
        yield running


def restart(cluster: Cluster, name: str) -> None:
    """Restarts one service; cluster.json then names its new process."""
    before = ClusterRecord.load(cluster.data_dir)
    restarted = cluster.det("deploy", "local", "restart-service", name, "--data-dir", str(cluster.data_dir))
    assert restarted.stdout.strip() == f"Restarted the {name} service"
    after = ClusterRecord.load(cluster.data_dir)
    assert before is not None and after is not None
    assert after.pids[name] != before.pids[name] and name in after.running()
    assert {k: v for k, v in after.pids.items() if k != name} == {
        k: v for k, v in before.pids.items() if k != name
    }


def first_trial(cluster: Cluster, experiment_id: int) -> int:
    trials = wait_for(lambda: cluster.trials(experiment_id), "the first trial")
    return int(trials[0]["id"])


def test_gateway_restart_mid_run_loses_no_metric(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(REPORTING_TRAIN_PY)
    gate = cluster.storage_folder("gate") / "restarted"
    hyperparameters = {"global_batch_size": 32, "gate": str(gate)}
    experiment_id = cluster.create(tmp_path, config("reporting", hyperparameters=hyperparameters))
    trial_id = first_trial(cluster, experiment_id)
    wait_for(lambda: "half of the reports sent" in cluster.logs(trial_id), "half of the reports")

    restart(cluster, "gateway")
    gate.touch()

    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment to complete")
    logs = cluster.logs(trial_id)
    assert "reporting done" in logs
    # The restart hit the shipper while it was sending: it waited for the new gateway.
    assert logs.count("reports: waiting for the gateway") == 1, logs  # one line per outage
    rows = cluster.query(
        'SELECT steps_completed, metrics FROM read_model.metrics WHERE trial_id = $1 AND "group" = $2',
        trial_id,
        "training",
    )
    assert sorted(row["steps_completed"] for row in rows) == list(range(1, REPORTS + 1))
    assert all(len(json.loads(row["metrics"])) == METRICS_PER_REPORT for row in rows)
    # And the log itself holds each report once: a retried batch was not appended twice.
    logged = Counter(r.steps_completed for event in cluster.metric_events(trial_id) for r in event.reports)
    assert sorted(logged) == list(range(1, REPORTS + 1))
    assert set(logged.values()) == {1}


def test_scheduler_and_searcher_restarts_carry_the_search_on(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SHORT_TRAIN_PY)
    searcher = {
        "name": "random",
        "metric": "validation_loss",
        "max_trials": 3,
        "max_concurrent_trials": 1,
        "max_length": {"batches": 10},
    }
    hyperparameters = {"x": {"type": "int", "minval": 1, "maxval": 100}}
    experiment_id = cluster.create(
        tmp_path, config("restarted-search", searcher=searcher, hyperparameters=hyperparameters)
    )
    trial_id = first_trial(cluster, experiment_id)
    wait_for(lambda: f"trial {trial_id} x" in cluster.logs(trial_id), "the first trial to run")

    restart(cluster, "scheduler")
    restart(cluster, "searcher")

    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment to complete")
    trials = cluster.trials(experiment_id)
    assert len(trials) == 3, trials
    assert [t["state"] for t in trials] == ["COMPLETED"] * 3, trials
    # One allocation each: a restarted scheduler does not assign a trial twice.
    allocations = cluster.query(
        "SELECT trial_id, count(*) AS n FROM read_model.allocations WHERE trial_id = ANY($1::bigint[])"
        " GROUP BY trial_id",
        [t["id"] for t in trials],
    )
    assert sorted(row["n"] for row in allocations) == [1, 1, 1]


def test_agent_restart_retries_the_running_trial(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SLEEPING_TRAIN_PY)
    experiment_id = cluster.create(tmp_path, config("agent-restart", max_restarts=1))
    trial_id = first_trial(cluster, experiment_id)
    wait_for(lambda: "sleeping" in cluster.logs(trial_id), "the trial to run")

    restart(cluster, "agent")

    wait_for(lambda: cluster.logs(trial_id).count("sleeping") == 2, "the trial to run again")
    trial = cluster.json("trial", "describe", str(trial_id))["trial"]
    # The agent went away under it: not the trial's fault, so no restart is counted.
    assert trial["state"] == "RUNNING" and trial["restarts"] == 0, trial
    first, second = cluster.query(
        "SELECT allocation_id, exit_code, error FROM read_model.allocations WHERE trial_id = $1"
        " ORDER BY trial_run_id",
        trial_id,
    )
    assert (first["allocation_id"], first["exit_code"], first["error"]) == (
        f"{trial_id}.1",
        -1,
        "agent restarted",
    )
    assert second["allocation_id"] == f"{trial_id}.2" and second["exit_code"] is None

    cluster.det("experiment", "kill", str(experiment_id))
    wait_for(lambda: cluster.experiment_state(experiment_id) == "CANCELED", "the experiment to end CANCELED")
    assert cluster.trials(experiment_id)[0]["state"] == "CANCELED"


# Validates every 4 batches of 100 ms with the searcher metric `x` and the time metric
# `batches`; stops when asked to.
ASHA_TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    x = det.get_cluster_info().trial.hparams["x"]
    with det.core.init() as core_context:
        for batch in range(1, 17):
            time.sleep(0.1)
            if batch % 4 == 0:
                core_context.train.report_validation_metrics(
                    steps_completed=batch, metrics={"x": x, "batches": batch}
                )
            if core_context.preempt.should_preempt():
                break
    """
)


def test_restarts_in_the_middle_of_an_adaptive_search_decide_nothing_twice(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(ASHA_TRAIN_PY)
    searcher = {
        "name": "async_halving",
        "metric": "x",
        "num_rungs": 2,
        "max_trials": 5,
        "max_concurrent_trials": 2,
        "time_metric": "batches",
        "max_time": 16,
    }
    hyperparameters = {"x": {"type": "int", "minval": 1, "maxval": 1000}}
    experiment_id = cluster.create(
        tmp_path,
        config("restarted-asha", searcher=searcher, hyperparameters=hyperparameters, max_restarts=2),
    )
    wait_for(lambda: len(cluster.trials(experiment_id)) >= 3, "the search to stop a trial", 120)

    restart(cluster, "searcher")
    restart(cluster, "scheduler")
    restart(cluster, "agent")

    wait_for(
        lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment to complete", 180
    )
    trials = cluster.trials(experiment_id)
    assert len(trials) == 5 and {t["state"] for t in trials} == {"COMPLETED"}, trials
    # Each decision is in the log once: one stop per trial, and at most one run more than
    # the agent's restart cost (a run lost with the agent is run again, not counted).
    assert all(t["restarts"] == 0 for t in trials), trials
    stops = cluster.query(
        "SELECT count(*) AS n FROM read_model.trials WHERE experiment_id = $1 AND stop_reason IS NOT NULL",
        experiment_id,
    )
    assert stops[0]["n"] == 5
    runs = cluster.query(
        "SELECT trial_id, count(*) AS n FROM read_model.allocations WHERE trial_id = ANY($1::bigint[])"
        " GROUP BY trial_id",
        [t["id"] for t in trials],
    )
    assert sum(row["n"] for row in runs) <= 5 + 2, runs
