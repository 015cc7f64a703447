"""A new user's first experiment, end to end: `det deploy local cluster-up`,
`det experiment create`, the Core API inside the trial, and the `det` commands
that look at the result — all through the real CLI against a real cluster."""

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, created_id, wait_for

pytestmark = pytest.mark.e2e

TRAIN_PY = textwrap.dedent(
    """
    import logging
    import determined as det

    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    info = det.get_cluster_info()
    assert info is not None, "running on the cluster"
    print("hparams", info.trial.hparams, "trial", info.trial.trial_id, flush=True)
    with det.core.init() as core_context:
        steps = 0
        for step in range(1, 6):
            steps = step * 10
            core_context.train.report_training_metrics(steps_completed=steps, metrics={"loss": 1.0 / step})
            core_context.train.report_progress(step / 5)
            if core_context.preempt.should_preempt():
                break
        core_context.train.report_validation_metrics(steps_completed=steps, metrics={"validation_loss": 0.5})
        with core_context.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
            (path / "weights.txt").write_text("w")
        with core_context.checkpoint.restore_path(storage_id) as path:
            print("restored", (path / "weights.txt").read_text(), flush=True)
    print("training done", flush=True)
    """
)

CONST_YAML = textwrap.dedent(
    """
    name: first
    entrypoint: python3 train.py
    hyperparameters:
      learning_rate: 0.1
      global_batch_size: 32
    searcher:
      name: single
      metric: validation_loss
      max_length:
        batches: 50
    max_restarts: 0
    """
)


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN_PY)
    (tmp_path / "const.yaml").write_text(CONST_YAML)
    return tmp_path


def test_first_experiment_runs_and_can_be_inspected(cluster: Cluster, context_dir: Path) -> None:
    created = cluster.det("experiment", "create", str(context_dir / "const.yaml"), str(context_dir), "-f")
    experiment_id = created_id(created.stdout)
    assert "training done" in created.stdout
    assert "Trial log stream ended" in created.stdout

    described = cluster.json("experiment", "describe", str(experiment_id))
    assert described["experiment"]["state"] == "COMPLETED"
    assert described["experiment"]["name"] == "first"
    trial_id = described["trials"][0]["id"]
    assert any(e["id"] == experiment_id for e in cluster.json("experiment", "list"))
    assert [t["id"] for t in cluster.json("experiment", "list-trials", str(experiment_id))] == [trial_id]

    trial = cluster.json("trial", "describe", str(trial_id))
    assert trial["trial"]["hparams"] == {"learning_rate": 0.1, "global_batch_size": 32}
    assert trial["trial"]["latest_training"]["metrics"] == {"loss": 0.2}
    assert trial["trial"]["latest_validation"]["metrics"] == {"validation_loss": 0.5}
    assert trial["checkpoints"][0]["steps_completed"] == 50

    logs = cluster.det("trial", "logs", str(trial_id)).stdout
    assert "restored w" in logs
    every = logs.splitlines()
    assert cluster.det("trial", "logs", str(trial_id), "--tail", "3").stdout.splitlines() == every[-3:]
    assert cluster.det("trial", "logs", str(trial_id), "--head", "2").stdout.splitlines() == every[:2]
    warned = cluster.det("trial", "logs", str(trial_id), "--level", "warning").stdout.splitlines()
    assert all(line.split("|| ", 1)[1].startswith(("WARNING:", "ERROR:", "CRITICAL:")) for line in warned)
    config = cluster.det("experiment", "config", str(experiment_id)).stdout
    assert "checkpoint_storage" in config


def test_the_readme_first_experiment_runs_from_the_shipped_folder(cluster: Cluster) -> None:
    """The README's newcomer path, as written: `cd examples/first_experiment` and create
    `const.yaml` with -f; no deprecation warning, and the followed logs show training."""
    example = Path(__file__).parents[2] / "examples" / "first_experiment"
    created = cluster.det("experiment", "create", str(example / "const.yaml"), str(example), "-f")
    assert "deprecated" not in created.stdout + created.stderr
    assert "step 100: loss" in created.stdout
    assert "done: y = " in created.stdout
    experiment_id = created_id(created.stdout)
    assert cluster.experiment_state(experiment_id) == "COMPLETED"


def test_the_agent_reports_its_slots(cluster: Cluster) -> None:
    [agent] = cluster.json("agent", "list")
    slots = cluster.json("slot", "list")
    assert len(agent["slots"]) == len(slots) == 2  # the cluster runs with --no-gpu --cpu-slots 2
    assert {(s["agent_id"], s["type"]) for s in slots} == {(agent["agent_id"], "cpu")}
    try:
        cluster.det("slot", "disable", agent["agent_id"], "1")
        assert [s["state"] for s in cluster.json("slot", "list")] == ["ENABLED", "DISABLED"]
    finally:
        cluster.det("slot", "enable", agent["agent_id"], "1")


def test_a_failing_entrypoint_ends_the_experiment_in_error(cluster: Cluster, context_dir: Path) -> None:
    (context_dir / "train.py").write_text("raise SystemExit('boom: the model exploded')\n")
    created = cluster.det("e", "create", str(context_dir / "const.yaml"), str(context_dir), "-f", check=False)
    assert created.returncode != 0
    experiment_id = created_id(created.stdout)
    assert "boom: the model exploded" in created.stdout
    state = wait_for(
        lambda: cluster.json("e", "describe", str(experiment_id))["experiment"]["state"] == "ERROR",
        "the experiment to end ERROR",
    )
    assert state


def test_a_removed_searcher_is_refused_at_create(cluster: Cluster, context_dir: Path) -> None:
    config = CONST_YAML.replace("name: single", "name: sync_halving\n  max_trials: 4")
    (context_dir / "removed.yaml").write_text(config)
    created = cluster.det("e", "create", str(context_dir / "removed.yaml"), str(context_dir), check=False)
    assert created.returncode == 1
    assert (
        "the `sync_halving` searcher has been removed and is not valid for new experiments" in created.stderr
    )


def test_included_paths_reach_the_trial(cluster: Cluster, context_dir: Path, tmp_path_factory: Any) -> None:
    shared = tmp_path_factory.mktemp("shared")
    (shared / "labels.txt").write_text("cat,dog\n")
    (context_dir / "train.py").write_text("print('labels:', open('labels.txt').read().strip(), flush=True)\n")
    created = cluster.det(
        "e",
        "create",
        str(context_dir / "const.yaml"),
        str(context_dir),
        "-i",
        str(shared / "labels.txt"),
        "-f",
    )
    assert "labels: cat,dog" in created.stdout


def test_a_script_for_older_releases_drives_its_length_from_searcher_operations(
    cluster: Cluster, context_dir: Path
) -> None:
    (context_dir / "train.py").write_text(
        textwrap.dedent(
            """
        import determined as det
        with det.core.init() as core_context:
            for op in core_context.searcher.operations():
                for epoch in range(op.length):
                    core_context.train.report_training_metrics(steps_completed=epoch + 1, metrics={"loss": 1.0})
                    op.report_progress(epoch + 1)
                core_context.train.report_validation_metrics(steps_completed=op.length, metrics={"validation_loss": 1.0})
                op.report_completed(1.0)
        print("trained for", op.length, "epochs", flush=True)
        """
        )
    )
    (context_dir / "old.yaml").write_text(CONST_YAML.replace("batches: 50", "epochs: 3"))
    created = cluster.det("e", "create", str(context_dir / "old.yaml"), str(context_dir), "-f")
    assert "trained for 3 epochs" in created.stdout
    [trial] = cluster.json("e", "list-trials", str(created_id(created.stdout)))
    assert (trial["state"], trial["total_batches"], trial["progress"]) == ("COMPLETED", 3, 1.0)


def test_a_paused_experiment_runs_once_activated(cluster: Cluster, context_dir: Path) -> None:
    created = cluster.det("e", "create", str(context_dir / "const.yaml"), str(context_dir), "--paused")
    experiment_id = created_id(created.stdout)
    described = cluster.json("e", "describe", str(experiment_id))
    assert (described["experiment"]["state"], described["trials"]) == ("PAUSED", [])
    assert (
        cluster.det("e", "activate", str(experiment_id)).stdout.strip()
        == f"Activated experiment {experiment_id}"
    )
    wait_for(
        lambda: cluster.json("e", "describe", str(experiment_id))["experiment"]["state"] == "COMPLETED",
        "the activated experiment to complete",
    )


def test_kill_cancels_a_running_experiment(cluster: Cluster, context_dir: Path) -> None:
    (context_dir / "train.py").write_text("import time\nprint('sleeping', flush=True)\ntime.sleep(600)\n")
    created = cluster.det("e", "create", str(context_dir / "const.yaml"), str(context_dir))
    experiment_id = created_id(created.stdout)
    wait_for(
        lambda: (
            "sleeping" in cluster.det("t", "logs", str(_first_trial(cluster, experiment_id))).stdout
            if _first_trial(cluster, experiment_id)
            else False
        ),
        "the trial to run",
    )
    assert cluster.det("e", "kill", str(experiment_id)).stdout.strip() == f"Killed experiment {experiment_id}"
    wait_for(
        lambda: cluster.json("e", "describe", str(experiment_id))["experiment"]["state"] == "CANCELED",
        "the experiment to end CANCELED",
    )
    # Why the trial ended: the user's kill, which the trial's lifecycle passed on to its run.
    chain, outcome = cluster.explain("trial", _first_trial(cluster, experiment_id))
    kill = chain.index((0, "experiment_kill_requested", ""))
    assert chain[kill + 1] == (1, "allocation_kill_requested", "experiment killed"), chain
    assert ("trial_ended" in [event_type for _, event_type, _ in chain]) and outcome.startswith("killed by ")
    assert outcome.endswith(" (its experiment)"), outcome


def _first_trial(cluster: Cluster, experiment_id: int) -> int | None:
    trials = cluster.json("e", "list-trials", str(experiment_id))
    return trials[0]["id"] if trials else None


@pytest.mark.parametrize(
    ("arrange", "message"),
    [
        (lambda d: ["missing.yaml", str(d)], "does not exist"),
        (lambda d: (d / "bad.yaml").write_text("searcher: [unclosed") and ["bad.yaml", str(d)], "YAML"),
        (lambda d: ["const.yaml", str(d / "no-such-folder")], "no-such-folder"),
    ],
    ids=["missing-config", "unparsable-yaml", "missing-context"],
)
def test_bad_input_is_refused_clearly(
    cluster: Cluster, context_dir: Path, arrange: Any, message: str
) -> None:
    before = cluster.json("e", "list")
    config, context = arrange(context_dir)
    result = cluster.det("e", "create", str(context_dir / config), context, check=False)
    assert result.returncode == 1
    assert message in result.stderr
    assert cluster.json("e", "list") == before


def test_cluster_up_twice_and_restart_keep_every_experiment(cluster: Cluster, context_dir: Path) -> None:
    again = cluster.up()
    assert again.returncode == 3 and "already running" in again.stdout  # 3: running, nothing done
    before = {e["id"]: e["state"] for e in cluster.json("e", "list")}
    assert cluster.down().returncode == 0
    restarted = cluster.up()
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    after = {e["id"]: e["state"] for e in cluster.json("e", "list")}
    assert {k: v for k, v in after.items() if k in before} == before
    created = cluster.det("e", "create", str(context_dir / "const.yaml"), str(context_dir), "-f")
    assert created_id(created.stdout) > max(before)


def test_a_taken_port_is_named(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        blocked = Cluster(Path("/tmp") / f"det-e2e-{uuid.uuid4().hex[:8]}")
        blocked.master_port = port
        result = blocked.up()
    assert result.returncode == 1
    assert f"port {port} (master) is already in use" in result.stderr
