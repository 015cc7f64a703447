"""Test mode, end to end through the `det` CLI: `det experiment create --local
--test-mode` runs the entrypoint on this machine with no cluster at all, and
`--test-mode` alone runs a one-batch copy of the experiment on the cluster and
says whether the model definition works (the seeds' "Best Practice")."""

import os
import textwrap
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, created_id, det

from deploy.local.servers import free_port

pytestmark = pytest.mark.e2e

SUCCESS = "Model definition test succeeded! \N{PARTY POPPER}"

LOCAL_TRAIN_PY = textwrap.dedent(
    """
    import os
    import determined as det

    assert det.get_cluster_info() is None, "local test mode runs off-cluster"
    assert os.path.exists("train.py"), "the context is the working folder"
    assert not os.path.exists("ignored.bin"), "a .detignore'd file reached the run folder"
    assert os.path.exists("data/kept.txt")
    assert os.environ["HOOKED"] == "yes", "startup-hook.sh was not sourced"
    assert os.environ["FROM_CONFIG"] == "1"
    print("running in", os.getcwd(), flush=True)
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"validation_loss": 0.4})
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "weights.txt").write_text("w")
    print("local training done", storage_id, flush=True)
    """
)

CLUSTER_TRAIN_PY = textwrap.dedent(
    """
    import determined as det

    info = det.get_cluster_info()
    assert info is not None
    print("test hparams", sorted(info.trial.hparams.items()), flush=True)
    assert info.trial.hparams == {"layers": 2, "optimizer": "adam", "global_batch_size": 32}
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": 0.5})
        core_context.train.report_validation_metrics(steps_completed=1, metrics={"validation_loss": 0.4})
    print("cluster test done", flush=True)
    """
)

# A PyTorchTrial for `entrypoint: model_def:TinyTrial`: it says which batches it trains and
# validates (global_batch_size 32: the whole data set is one batch).
TRIAL_MODEL_DEF = textwrap.dedent(
    """
    import os
    import torch
    from determined import pytorch

    torch.set_num_threads(1)


    class TinyTrial(pytorch.PyTorchTrial):
        def __init__(self, context):
            self.context = context
            self.model = context.wrap_model(torch.nn.Linear(2, 1))
            self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=0.1))

        def _data(self):
            x = torch.rand(64, 2)
            data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
            return pytorch.DataLoader(data, batch_size=self.context.get_per_slot_batch_size())

        def build_training_data_loader(self):
            return self._data()

        def build_validation_data_loader(self):
            return self._data()

        def train_batch(self, batch, epoch_idx, batch_idx):
            loss = torch.nn.functional.mse_loss(self.model(batch[0]), batch[1])
            self.context.backward(loss)
            self.context.step_optimizer(self.optimizer)
            hooked = os.environ.get("HOOKED") == "yes"
            print("trained batch", batch_idx, "of", len(batch[0]), "(hooked)" if hooked else "", flush=True)
            return {"loss": loss}

        def evaluate_batch(self, batch, batch_idx):
            print("validated batch", batch_idx, flush=True)
            return {"validation_loss": torch.nn.functional.mse_loss(self.model(batch[0]), batch[1])}
    """
)

CONFIG_YAML = textwrap.dedent(
    """
    name: search
    entrypoint: python3 train.py
    hyperparameters:
      global_batch_size: 32
      layers: {type: int, minval: 1, maxval: 4}
      optimizer: {type: categorical, vals: [adam, sgd]}
    searcher:
      name: random
      metric: validation_loss
      max_trials: 8
      max_length:
        batches: 1000
    environment:
      environment_variables: [FROM_CONFIG=1]
    """
)


@pytest.fixture
def local_env(tmp_path: Path) -> dict[str, str]:
    """No cluster: DET_MASTER names a port nobody listens on; off-cluster
    checkpoints go under a temporary XDG data folder."""
    return dict(os.environ, DET_MASTER=f"localhost:{free_port()}", XDG_DATA_HOME=str(tmp_path / "xdg"))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text(LOCAL_TRAIN_PY)
    (folder / "config.yaml").write_text(CONFIG_YAML)
    (folder / "startup-hook.sh").write_text("export HOOKED=yes\n")
    (folder / "ignored.bin").write_bytes(b"\0" * 1024)
    (folder / "data" / "kept.txt").write_text("kept")
    (folder / ".detignore").write_text("ignored.bin\n")
    return folder


def test_local_test_mode_runs_the_entrypoint_off_cluster(local_env: dict[str, str], model_dir: Path) -> None:
    result = det(local_env, "experiment", "create", "--local", "--test-mode",
                 str(model_dir / "config.yaml"), str(model_dir))  # fmt: skip

    assert result.returncode == 0, result.stdout + result.stderr
    assert "local training done" in result.stdout
    assert result.stdout.rstrip().endswith(SUCCESS)
    run_folder = next(line for line in result.stdout.splitlines() if line.startswith("running in "))
    assert Path(run_folder.split(" ", 2)[2]) != model_dir  # a temporary copy, not the folder itself
    assert not Path(run_folder.split(" ", 2)[2]).exists()  # and it is cleaned up
    checkpoints = Path(local_env["XDG_DATA_HOME"]) / "determined" / "checkpoints"
    assert [p.name for p in checkpoints.glob("*/weights.txt")] == ["weights.txt"]
    assert "Created experiment" not in result.stdout


def test_local_test_mode_fails_when_the_entrypoint_fails(local_env: dict[str, str], model_dir: Path) -> None:
    (model_dir / "train.py").write_text("raise RuntimeError('boom: bad model definition')\n")

    result = det(local_env, "e", "create", "--local", "-t", str(model_dir / "config.yaml"), str(model_dir))

    assert result.returncode == 1
    assert "RuntimeError: boom: bad model definition" in result.stderr  # the entrypoint's own output
    assert "Model definition test failed: the entrypoint exited with code 1" in result.stderr
    assert SUCCESS not in result.stdout


def test_local_test_mode_trains_one_batch_of_a_trial_class(
    local_env: dict[str, str], model_dir: Path
) -> None:
    (model_dir / "model_def.py").write_text(TRIAL_MODEL_DEF)
    config = model_dir / "legacy.yaml"
    config.write_text(CONFIG_YAML.replace("python3 train.py", "model_def:TinyTrial"))

    result = det(local_env, "e", "create", "--local", "--test-mode", str(config), str(model_dir))

    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("trained batch") == 1 and "trained batch 0 of 32 (hooked)" in result.stdout
    assert result.stdout.count("validated batch") == 1
    assert result.stdout.rstrip().endswith(SUCCESS)


def test_local_needs_test_mode(local_env: dict[str, str], model_dir: Path) -> None:
    result = det(local_env, "e", "create", "--local", str(model_dir / "config.yaml"), str(model_dir))

    assert result.returncode == 1
    assert "--local needs --test-mode" in result.stderr


def test_local_test_mode_validates_the_config_first(local_env: dict[str, str], model_dir: Path) -> None:
    (model_dir / "bad.yaml").write_text("entrypoint: python3 train.py\nsearcher: {name: random}\n")

    result = det(
        local_env, "e", "create", "--local", "--test-mode", str(model_dir / "bad.yaml"), str(model_dir)
    )

    assert result.returncode == 1
    assert "metric" in result.stderr
    assert "local training done" not in result.stdout


def test_test_mode_on_the_cluster_runs_one_batch_copy(cluster: Cluster, model_dir: Path) -> None:
    (model_dir / "train.py").write_text(CLUSTER_TRAIN_PY)

    result = cluster.det(
        "experiment", "create", "--test-mode", str(model_dir / "config.yaml"), str(model_dir)
    )

    assert result.stdout.rstrip().endswith(SUCCESS)
    experiment_id = created_id(result.stdout)
    described = cluster.json("experiment", "describe", str(experiment_id))
    assert described["experiment"]["state"] == "COMPLETED"
    assert described["experiment"]["name"] == "search (test mode)"
    assert [t["state"] for t in described["trials"]] == ["COMPLETED"]
    config = cluster.det("experiment", "config", str(experiment_id)).stdout
    assert "name: single" in config and "max_restarts: 0" in config
    assert "save_trial_latest: 0" in config


def test_test_mode_on_the_cluster_trains_one_batch_of_a_trial_class(
    cluster: Cluster, model_dir: Path
) -> None:
    (model_dir / "model_def.py").write_text(TRIAL_MODEL_DEF)
    config = model_dir / "legacy.yaml"
    config.write_text(CONFIG_YAML.replace("python3 train.py", "model_def:TinyTrial"))

    result = cluster.det("experiment", "create", "--test-mode", str(config), str(model_dir))

    assert result.stdout.rstrip().endswith(SUCCESS)
    experiment_id = created_id(result.stdout)
    described = cluster.json("experiment", "describe", str(experiment_id))
    assert [t["state"] for t in described["trials"]] == ["COMPLETED"]
    [trial_id] = [t["id"] for t in described["trials"]]
    logs = cluster.det("trial", "logs", str(trial_id)).stdout
    assert logs.count("trained batch") == 1 and "trained batch 0 of 32 (hooked)" in logs


def test_test_mode_on_the_cluster_shows_the_logs_of_a_failure(cluster: Cluster, model_dir: Path) -> None:
    (model_dir / "train.py").write_text("raise SystemExit('boom: the test run exploded')\n")

    result = cluster.det("e", "create", "-t", str(model_dir / "config.yaml"), str(model_dir), check=False)

    assert result.returncode == 1
    experiment_id = created_id(result.stdout)
    assert "boom: the test run exploded" in result.stdout  # the trial's logs
    assert f"Model definition test failed: experiment {experiment_id} ended ERROR" in result.stderr
    assert SUCCESS not in result.stdout
