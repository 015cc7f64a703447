"""Determined's quickstart, end to end (issue 9): `examples/mnist_pytorch`, a `PyTorchTrial`
on the offline MNIST-format set its data.py writes, through the real CLI and cluster.

- const.yaml (the Trainer script, 1 slot), distributed.yaml (2 CPU slots, the
  torch_distributed launcher, gloo), adaptive.yaml (adaptive_asha, time_metric batches) and
  the seed-era legacy.yaml (`entrypoint: model_def:MNistTrial`, `searcher.max_length`) each
  end COMPLETED with validation metrics (`batches` added by the Trainer) and checkpoints;
- a trial paused at a checkpoint and activated continues bit for bit: its training losses
  equal those of an uninterrupted trial with the same seed and hyperparameters, batch for
  batch (OMP_NUM_THREADS=1: torch computes on one thread);
- `det experiment create -t const.yaml` trains one batch.

The configs are the shipped ones with shorter lengths (the entrypoint's flags), so that the
whole file runs in a few minutes on 2 CPU cores.
"""

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.e2e_cluster import Cluster, created_id, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_pytorch"
TERMINAL = ("COMPLETED", "ERROR", "CANCELED")
SUCCESS = "Model definition test succeeded!"


@pytest.fixture
def context_dir(tmp_path: Path) -> Path:
    """A copy of the example (the tests write their configs into the context)."""
    folder = tmp_path / "mnist_pytorch"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return folder


def example_config(file: str, *, entrypoint_flags: str = "", **changes: Any) -> str:
    """The shipped config with the script's length flags replaced by `entrypoint_flags`,
    one torch thread, no restarts, and `changes` merged in at the top level."""
    document: dict[str, Any] = yaml.safe_load((EXAMPLE / file).read_text())
    if entrypoint_flags:
        script = document["entrypoint"].split(" train.py")[0]
        document["entrypoint"] = f"{script} train.py {entrypoint_flags}"
    document["environment"] = {"environment_variables": ["OMP_NUM_THREADS=1"]}
    document["max_restarts"] = 0
    document.update(changes)
    return json.dumps(document)


def run_to_end(cluster: Cluster, context: Path, config: str, deadline_s: float = 240) -> int:
    experiment_id = cluster.create(context, config)
    wait_for(
        lambda: cluster.experiment_state(experiment_id) in TERMINAL, f"experiment {experiment_id}", deadline_s
    )
    return experiment_id


def assert_completed(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    trials = cluster.trials(experiment_id)
    logs = "\n".join(cluster.logs(t["id"])[-4000:] for t in trials if t["state"] != "COMPLETED")
    assert cluster.experiment_state(experiment_id) == "COMPLETED", logs
    assert trials and {t["state"] for t in trials} == {"COMPLETED"}, (trials, logs)
    return trials


def metrics(cluster: Cluster, trial_id: int, group: str) -> list[dict[str, Any]]:
    points = cluster.json("trial", "metrics", str(trial_id), "--group", group)
    return sorted(points, key=lambda p: int(p["steps_completed"]))


def checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
    return list(cluster.json("trial", "describe", str(trial_id))["checkpoints"])


def assert_validated_and_checkpointed(cluster: Cluster, trial_id: int, batches: int) -> None:
    validations = metrics(cluster, trial_id, "validation")
    assert validations, f"trial {trial_id} reported no validation metrics"
    last = validations[-1]
    assert last["steps_completed"] == batches, validations
    assert {"validation_loss", "accuracy", "batches", "epochs"} <= set(last["metrics"]), last
    assert last["metrics"]["batches"] == batches, last
    saved = checkpoints(cluster, trial_id)
    assert saved and max(c["steps_completed"] for c in saved) == batches, saved


def test_const_trains_validates_and_checkpoints(cluster: Cluster, context_dir: Path) -> None:
    flags = "--batches 64 --validation-period 32 --reporting-period 16"
    experiment_id = run_to_end(cluster, context_dir, example_config("const.yaml", entrypoint_flags=flags))
    [trial] = assert_completed(cluster, experiment_id)
    assert trial["total_batches"] == 64, trial
    assert_validated_and_checkpointed(cluster, trial["id"], 64)
    validations = metrics(cluster, trial["id"], "validation")
    assert [p["steps_completed"] for p in validations] == [32, 64], validations
    assert validations[-1]["metrics"]["accuracy"] > 0.3, validations  # 10 classes: 0.1 is chance
    training = metrics(cluster, trial["id"], "training")
    assert [p["steps_completed"] for p in training] == [16, 32, 48, 64], training
    assert all("loss" in p["metrics"] for p in training), training

    # The checkpoint holds the trial: load_trial_from_checkpoint_path rebuilds it with its weights.
    from determined import pytorch

    latest = max(checkpoints(cluster, trial["id"]), key=lambda c: int(c["steps_completed"]))
    [folder] = [p for p in cluster.data_dir.rglob(latest["uuid"]) if p.is_dir()]
    assert (folder / "load_data.json").exists() and (folder / "code" / "model_def.py").exists()
    loaded = pytorch.load_trial_from_checkpoint_path(str(folder))
    assert type(loaded).__name__ == "MNistTrial"


def test_distributed_trains_on_two_cpu_slots(cluster: Cluster, context_dir: Path) -> None:
    flags = "--batches 40 --validation-period 20 --reporting-period 10"
    experiment_id = run_to_end(
        cluster, context_dir, example_config("distributed.yaml", entrypoint_flags=flags)
    )
    [trial] = assert_completed(cluster, experiment_id)
    assert trial["total_batches"] == 40, trial
    assert_validated_and_checkpointed(cluster, trial["id"], 40)
    # Two workers ran; only the chief reported (one point per reporting boundary).
    assert cluster.det("trial", "logs", str(trial["id"]), "--rank", "1").stdout.strip()
    training = metrics(cluster, trial["id"], "training")
    assert [p["steps_completed"] for p in training] == [10, 20, 30, 40], training


def test_adaptive_search_completes_several_trials(cluster: Cluster, context_dir: Path) -> None:
    flags = "--batches 32 --validation-period 8 --reporting-period 8"
    config = example_config("adaptive.yaml", entrypoint_flags=flags)
    document = json.loads(config)
    document["searcher"].update(max_trials=4, max_concurrent_trials=2, max_time=32)
    experiment_id = run_to_end(cluster, context_dir, json.dumps(document), deadline_s=420)
    trials = assert_completed(cluster, experiment_id)
    assert len(trials) == 4, trials
    # Every trial validated at least once (its `batches` is what ASHA judges); some trial
    # trained to max_time and checkpointed there.
    for trial in trials:
        assert metrics(cluster, trial["id"], "validation"), trial
    top = [t for t in trials if t["total_batches"] == 32]
    assert top, trials
    assert_validated_and_checkpointed(cluster, top[0]["id"], 32)


def test_a_seed_era_trial_class_entrypoint_runs(cluster: Cluster, context_dir: Path) -> None:
    config = example_config(
        "legacy.yaml",
        searcher={"name": "single", "metric": "validation_loss", "max_length": {"batches": 40}},
        min_validation_period={"batches": 20},
        scheduling_unit=10,
    )
    experiment_id = run_to_end(cluster, context_dir, config)
    [trial] = assert_completed(cluster, experiment_id)
    assert trial["total_batches"] == 40, trial
    assert_validated_and_checkpointed(cluster, trial["id"], 40)
    assert [p["steps_completed"] for p in metrics(cluster, trial["id"], "validation")] == [20, 40]
    assert [p["steps_completed"] for p in metrics(cluster, trial["id"], "training")] == [10, 20, 30, 40]


def training_losses(cluster: Cluster, trial_id: int) -> dict[int, float]:
    return {
        int(p["steps_completed"]): float(p["metrics"]["loss"]) for p in metrics(cluster, trial_id, "training")
    }


def test_a_paused_trial_resumes_with_the_same_loss_curve(cluster: Cluster, context_dir: Path) -> None:
    # Same experiment seed (so the same trial seed) and hyperparameters for both runs.
    flags = "--batches 240 --reporting-period 4"
    config = example_config("const.yaml", entrypoint_flags=flags, reproducibility={"experiment_seed": 7})
    uninterrupted = run_to_end(cluster, context_dir, config)
    [reference] = assert_completed(cluster, uninterrupted)

    interrupted = cluster.create(context_dir, config)

    def trained_a_while() -> list[dict[str, Any]]:
        trials = cluster.trials(interrupted)
        return trials if trials and trials[0]["total_batches"] >= 8 else []

    [trial] = wait_for(trained_a_while, "the trial to train a while", 120)
    cluster.det("experiment", "pause", str(interrupted))
    paused = wait_for(
        lambda: [t for t in cluster.trials(interrupted) if t["state"] in ("PAUSED", "COMPLETED")],
        "the trial to stop",
        120,
    )
    assert paused[0]["state"] == "PAUSED", "the trial ended before the pause reached it"
    stopped_at = paused[0]["total_batches"]
    assert 0 < stopped_at < 240, paused
    assert max(c["steps_completed"] for c in checkpoints(cluster, trial["id"])) == stopped_at

    cluster.det("experiment", "activate", str(interrupted))
    wait_for(lambda: cluster.experiment_state(interrupted) in TERMINAL, "the resumed experiment", 240)
    [resumed] = assert_completed(cluster, interrupted)
    assert resumed["runs"] == 2 and resumed["restarts"] == 0, resumed

    expected, got = training_losses(cluster, reference["id"]), training_losses(cluster, resumed["id"])
    assert sorted(got) == sorted(expected) == list(range(4, 241, 4)), (sorted(got), sorted(expected))
    differences = {batch: abs(got[batch] - expected[batch]) for batch in expected}
    assert max(differences.values()) == 0.0, {b: d for b, d in differences.items() if d}


def test_test_mode_on_the_cluster_trains_one_batch(cluster: Cluster, context_dir: Path) -> None:
    (context_dir / "const.yaml").write_text(example_config("const.yaml"))
    result = cluster.det("experiment", "create", "-t", str(context_dir / "const.yaml"), str(context_dir))
    assert SUCCESS in result.stdout, result.stdout + result.stderr
    [trial] = cluster.trials(created_id(result.stdout))
    assert trial["state"] == "COMPLETED" and trial["total_batches"] == 1, trial
