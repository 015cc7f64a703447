"""`det experiment create --local --test-mode` with a `module:Class` entrypoint: the
harness trains one batch of the PyTorchTrial, validates one batch and checkpoints once,
off any cluster, in a temporary copy of the context."""

import textwrap
from pathlib import Path

import pytest

from determined.cli._test_mode import SUCCESS, run_local

MODEL_DEF = textwrap.dedent(
    """
    import torch
    from determined import pytorch

    torch.set_num_threads(1)


    def _data(context):
        x = torch.arange(64, dtype=torch.float32).reshape(32, 2) / 64
        dataset = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return pytorch.DataLoader(dataset, batch_size=context.get_per_slot_batch_size())


    class Outer:
        class TinyTrial(pytorch.PyTorchTrial):
            def __init__(self, context):
                self.context = context
                self.model = context.wrap_model(torch.nn.Linear(2, 1))
                lr = context.get_hparam("lr")
                self.optimizer = context.wrap_optimizer(torch.optim.SGD(self.model.parameters(), lr=lr))

            def build_training_data_loader(self):
                return _data(self.context)

            def build_validation_data_loader(self):
                return _data(self.context)

            def train_batch(self, batch, epoch_idx, batch_idx):
                x, y = batch
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.context.backward(loss)
                self.context.step_optimizer(self.optimizer)
                print("trained batch", batch_idx, "with lr", self.context.get_hparam("lr"), flush=True)
                if self.context.get_hparam("explode"):
                    raise RuntimeError("boom in train_batch")
                return {"loss": loss}

            def evaluate_batch(self, batch, batch_idx):
                x, y = batch
                print("validated batch", batch_idx, flush=True)
                return {"validation_loss": torch.nn.functional.mse_loss(self.model(x), y)}
    """
)

CONFIG_YAML = textwrap.dedent(
    """
    name: legacy
    entrypoint: model_def:Outer.TinyTrial
    hyperparameters:
      global_batch_size: 4
      lr: {type: double, minval: 0.1, maxval: 0.3}
      explode: EXPLODE
    searcher:
      name: random
      metric: validation_loss
      max_trials: 4
      max_length: {epochs: 5}
    records_per_epoch: 32
    min_validation_period: {batches: 2}
    """
)


@pytest.fixture
def context_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))  # in case anything falls back there
    for name in ("DET_MASTER", "DET_ALLOCATION_ID"):
        monkeypatch.delenv(name, raising=False)
    context = tmp_path / "context"
    context.mkdir()
    (context / "model_def.py").write_text(MODEL_DEF)
    return context


def test_one_batch_of_a_trial_class_runs_locally(
    context_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code = run_local(CONFIG_YAML.replace("EXPLODE", "false"), context_dir, [])

    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert out.count("trained batch") == 1 and "trained batch 0 with lr 0.2" in out  # the test-mode hparams
    assert out.count("validated batch") == 1
    assert out.rstrip().endswith(SUCCESS)
    assert not (context_dir.parent / "xdg").exists()  # the checkpoint went to the run's own folder


def test_a_failing_trial_class_fails_the_local_test(
    context_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    code = run_local(CONFIG_YAML.replace("EXPLODE", "true"), context_dir, [])

    _, err = capfd.readouterr()
    assert code == 1
    assert "boom in train_batch" in err
    assert "Model definition test failed: the entrypoint exited with code 1" in err
