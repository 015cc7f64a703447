"""Detached runs (determined.experimental.core_v2) against a local cluster (issue 22):

- a plain script, run with DET_MASTER and the CLI's login, becomes an unmanaged experiment
  whose metrics and checkpoint `det experiment describe` and the SDK show;
- the same script killed while it runs leaves its trial ERROR once its heartbeats stop (the
  session cluster's timeout is short: conftest.py);
- the same script as an experiment's entrypoint runs managed, as any trial.
"""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, wait_for

pytestmark = pytest.mark.e2e

# Three steps, a validation and a checkpoint; with --hang it then waits to be killed.
SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    from determined.experimental import core_v2

    config = core_v2.Config(
        name="detached-e2e",
        hparams={"lr": 0.1},
        searcher={"name": "single", "metric": "loss"},
        checkpoint_storage=sys.argv[1] if len(sys.argv) > 1 else None,
    )
    core_v2.init(config=config)
    for step in range(1, 4):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
    core_v2.train.report_validation_metrics(steps_completed=3, metrics={"loss": 0.3})
    with core_v2.checkpoint.store_path({"steps_completed": 3}) as (path, _):
        (path / "model.txt").write_text("weights")
    print("experiment", core_v2.info.trial.experiment_id, flush=True)
    if "--hang" in sys.argv:
        time.sleep(3600)
    core_v2.close()
    """
)


def script(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "detached.py"
    path.write_text(SCRIPT)
    return path


def experiment_of(line: str) -> int:
    assert line.startswith("experiment "), line
    return int(line.split()[1])


def described(cluster: Cluster, experiment_id: int) -> dict[str, Any]:
    return dict(cluster.json("experiment", "describe", str(experiment_id)))


def test_a_detached_script_shows_in_describe_and_the_sdk(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = cluster.storage_folder("detached")
    run = subprocess.run(
        [sys.executable, str(script(tmp_path)), str(storage)],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    experiment_id = experiment_of(run.stdout.splitlines()[-1])
    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the detached run to end", 60)
    shown = cluster.det("experiment", "describe", str(experiment_id)).stdout
    assert "Unmanaged: a detached run (core_v2)" in shown, shown
    answer = described(cluster, experiment_id)
    [trial] = answer["trials"]
    assert answer["experiment"]["unmanaged"] and trial["state"] == "COMPLETED"
    assert trial["latest_training"]["metrics"] == {"loss": 1 / 3}
    assert (trial["latest_validation"]["steps_completed"], trial["searcher_metric_value"]) == (3, 0.3)
    [checkpoint] = cluster.json("experiment", "list-checkpoints", str(experiment_id))
    assert (storage / checkpoint["uuid"] / "model.txt").read_text() == "weights"

    from determined.experimental._determined import Determined

    monkeypatch.setenv("DET_CONFIG_DIR", cluster.env["DET_CONFIG_DIR"])  # the CLI's login: admin
    client = Determined(master=cluster.env["DET_MASTER"])
    experiment = client.get_experiment(experiment_id)
    assert experiment.unmanaged
    assert experiment.top_checkpoint().uuid == checkpoint["uuid"]
    [sdk_trial] = experiment.list_trials()
    assert sdk_trial.hparams == {"lr": 0.1}


def test_a_killed_script_leaves_its_trial_error(cluster: Cluster, tmp_path: Path) -> None:
    storage = cluster.storage_folder("killed")
    with subprocess.Popen(
        [sys.executable, str(script(tmp_path)), str(storage), "--hang"],
        env=cluster.env,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        experiment_id = experiment_of(process.stdout.readline().strip())
        assert cluster.trials(experiment_id)[0]["state"] in ("ACTIVE", "RUNNING")
        process.send_signal(signal.SIGKILL)
    wait_for(lambda: cluster.experiment_state(experiment_id) == "ERROR", "the silent run to end ERROR", 90)
    [trial] = cluster.trials(experiment_id)
    assert trial["state"] == "ERROR"


def test_the_same_script_runs_managed_on_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    context = tmp_path / "context"
    script(context)
    config = textwrap.dedent(
        f"""
        name: managed-core-v2
        entrypoint: python3 detached.py
        searcher: {{name: single, metric: loss, max_length: 3}}
        max_restarts: 0
        checkpoint_storage: {{type: shared_fs, host_path: {cluster.storage_folder("managed")}}}
        """
    )
    experiment_id = cluster.create(context, config)
    wait_for(
        lambda: cluster.experiment_state(experiment_id) in ("COMPLETED", "ERROR"), "the trial to end", 120
    )
    answer = described(cluster, experiment_id)
    assert answer["experiment"]["state"] == "COMPLETED", cluster.logs(answer["trials"][0]["id"])
    assert not answer["experiment"].get("unmanaged")
    assert "experiment" in cluster.logs(answer["trials"][0]["id"])
    assert cluster.json("experiment", "list-checkpoints", str(experiment_id))
