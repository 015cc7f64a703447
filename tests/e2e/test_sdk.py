"""The Python SDK (`determined.experimental.client`) against a local cluster (issue 10):

- the example script `examples/sdk/best_checkpoint.py` creates the MNIST experiment, waits,
  downloads the top checkpoint and loads it with `det.pytorch.load_trial_from_checkpoint_path`;
- an experiment driven from Python: create, await its first trial, pause, activate, wait;
  its trials, logs and metrics; checkpoints ranked by the searcher metric, downloaded and
  deleted; a warm start from its trial (searcher.source_trial_id); the model registry; kill.
"""

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.e2e_cluster import Cluster, wait_for

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdk" / "best_checkpoint.py"

# Ten steps of 300 ms, a checkpoint and a validation every two steps (loss 1/step, so the best
# is the last one); stops when asked to and resumes from the latest checkpoint.
TRAIN_PY = textwrap.dedent(
    """
    import time
    import determined as det

    info = det.get_cluster_info()
    start = 0
    with det.core.init() as core_context:
        if info.latest_checkpoint:
            with core_context.checkpoint.restore_path(info.latest_checkpoint) as path:
                start = int((path / "step").read_text())
            print("resumed at", start, flush=True)
        for step in range(start + 1, 11):
            time.sleep(0.3)
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
            if step % 2 == 0:
                with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _):
                    (path / "step").write_text(str(step))
                core_context.train.report_validation_metrics(
                    steps_completed=step, metrics={"validation_loss": 1 / step}
                )
            if core_context.preempt.should_preempt():
                print("paused at", step, flush=True)
                break
    """
)

# Sleeps until killed.
FOREVER_PY = textwrap.dedent(
    """
    import time
    import determined as det

    with det.core.init() as core_context:
        for step in range(1, 100000):
            time.sleep(0.1)
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0})
    """
)


def config(name: str, storage: Path) -> dict[str, Any]:
    return {
        "name": name,
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True},
        "max_restarts": 0,
        "preemption_timeout": 30,
        # The default policy would leave two of the five; the test lists all of them.
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage), "save_trial_latest": 5},
    }


@pytest.fixture
def client(cluster: Cluster) -> Iterator[Any]:
    from determined.experimental import client

    client.login(master=cluster.env["DET_MASTER"], user="determined", password=cluster.password)
    yield client


def printed(pattern: str, out: str) -> str:
    """What the example printed for `pattern`'s group."""
    found = re.search(pattern, out)
    assert found, f"{pattern!r} not in:\n{out}"
    return found.group(1)


@pytest.mark.slow
def test_the_sdk_example_trains_downloads_and_loads_the_best_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    env = dict(cluster.env, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), "--batches", "40", "--output", str(tmp_path / "checkpoints")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    experiment_id = int(printed(r"Created experiment (\d+)", out))
    uuid = printed(r"Best checkpoint ([0-9a-f-]{36})", out)
    assert (tmp_path / "checkpoints" / uuid / "load_data.json").exists(), out
    accuracy = float(printed(r"Loaded MNistTrial: test accuracy ([0-9.]+)", out))
    assert accuracy > 0.3, out  # ten classes: 0.1 is chance
    # The top checkpoint is the experiment's best by its searcher metric.
    best = cluster.json("experiment", "list-checkpoints", str(experiment_id), "--best", "1")
    assert [c["uuid"] for c in best] == [uuid], best


def logs_of(client: Any, trial_id: int) -> str:
    return "".join(client.get_trial(trial_id).logs())


def test_an_experiment_driven_from_python(client: Any, cluster: Cluster, tmp_path: Path) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY)
    experiment = client.create_experiment(
        config=config("sdk", cluster.storage_folder("storage")), model_dir=str(context)
    )
    assert experiment.get_config()["name"] == "sdk"
    assert experiment.id in {e.id for e in client.list_experiments()}

    first = experiment.await_first_trial(interval=0.2)
    wait_for(lambda: first.list_checkpoints(), "the first checkpoint", 60)
    experiment.pause()
    wait_for(lambda: "paused at" in logs_of(client, first.id), "the trial to stop", 60)
    experiment.activate()
    assert experiment.wait(interval=0.2) == client.ExperimentState.COMPLETED

    [trial] = experiment.list_trials()
    assert trial.id == first.id
    assert "resumed at" in logs_of(client, trial.id)
    validation = list(trial.iter_metrics("validation"))
    assert [m.steps_completed for m in validation] == [2, 4, 6, 8, 10], validation
    assert validation[-1].metrics["validation_loss"] == pytest.approx(0.1)

    # Ranked by the searcher metric (smaller is better): the best is step 10's.
    top = experiment.top_checkpoint()
    assert top.metadata["steps_completed"] == 10, top.metadata
    assert trial.top_checkpoint().uuid == top.uuid
    ranked = experiment.list_checkpoints(
        sort_by=client.CheckpointSortBy.SEARCHER_METRIC, order_by=client.OrderBy.ASC, max_results=2
    )
    assert [c.metadata["steps_completed"] for c in ranked] == [10, 8]
    by_steps = trial.list_checkpoints(sort_by="steps_completed", order_by="asc")
    assert [c.metadata["steps_completed"] for c in by_steps] == [2, 4, 6, 8, 10]

    # Download: the files of the checkpoint, direct and through the gateway.
    for mode in ("direct", "master"):
        path = Path(top.download(str(tmp_path / f"top-{mode}"), mode=mode))
        assert (path / "step").read_text() == "10", mode
        assert "steps_completed" in (path / "metadata.json").read_text()
    fetched = client.get_checkpoint(top.uuid)
    assert fetched.uuid == top.uuid and fetched.state == client.CheckpointState.COMPLETED

    # A warm start from the trial (searcher.source_trial_id): the new trial starts from its
    # latest checkpoint (step 10), so it has nothing left to train.
    warm_config = config("sdk-warm", Path(experiment.config["checkpoint_storage"]["host_path"]))
    warm_config["searcher"]["source_trial_id"] = trial.id
    warm = client.create_experiment(config=warm_config, model_dir=str(context))
    assert warm.wait(interval=0.2) == client.ExperimentState.COMPLETED
    [warm_trial] = warm.list_trials()
    assert "resumed at 10" in logs_of(client, warm_trial.id)

    # The model registry: a registered checkpoint is a version, and stays.
    model = client.create_model(f"sdk-model-{experiment.id}")
    version = model.register_version(top.uuid)
    assert client.get_model(model.name).get_version().checkpoint.uuid == top.uuid, version
    assert [v.checkpoint.uuid for v in client.get_model(model.name).get_versions()] == [top.uuid]
    assert model.name in {m.name for m in client.list_models()}
    with pytest.raises(client.APIError, match=top.uuid):
        client.get_checkpoint(top.uuid).delete()

    # Deleting another checkpoint.
    oldest = by_steps[0]
    oldest.delete()
    wait_for(
        lambda: client.get_checkpoint(oldest.uuid).state == client.CheckpointState.DELETED, "the deletion", 60
    )
    assert oldest.uuid not in {c.uuid for c in experiment.list_checkpoints()}


def test_kill_from_python(client: Any, cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(FOREVER_PY)
    experiment = client.create_experiment(
        config=config("sdk-kill", cluster.storage_folder("storage")), model_dir=str(tmp_path)
    )
    experiment.await_first_trial(interval=0.2)
    experiment.kill()
    assert experiment.wait(interval=0.2) == client.ExperimentState.CANCELED
