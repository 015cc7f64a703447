"""The Trainer off-cluster: the loop's boundaries, metrics, checkpoints, preemption, test
mode and TensorBoard, with the tiny trials of `pytorch_trials`."""

import json
import pathlib
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from pytorch_trials import TinyTrial

import determined as det
import determined.pytorch as det_torch
from determined.core import _checkpoint
from determined.pytorch import _state

# Exact comparisons of losses need one thread (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Recorder:
    """Stands in for the core context's report calls, to see what the Trainer reports."""

    def __init__(self, context: det_torch.PyTorchTrialContext) -> None:
        self.training: list[tuple[int, dict[str, Any], list[dict[str, Any]]]] = []
        self.validation: list[tuple[int, dict[str, Any]]] = []
        self.preempt_calls = 0
        self.preempt_at: int | None = None  # answer True from this call on (1-based)
        train = context._core.train
        train.report_training_metrics = self._training  # type: ignore[method-assign]
        train.report_validation_metrics = self._validation  # type: ignore[method-assign]
        context._core.preempt.should_preempt = self._should_preempt  # type: ignore[method-assign]

    def _training(self, steps_completed: int, metrics: dict[str, Any], batch_metrics: Any = None) -> None:
        self.training.append((steps_completed, metrics, batch_metrics))

    def _validation(self, steps_completed: int, metrics: dict[str, Any]) -> None:
        self.validation.append((steps_completed, metrics))

    def _should_preempt(self, auto_ack: bool = True) -> bool:
        self.preempt_calls += 1
        return self.preempt_at is not None and self.preempt_calls >= self.preempt_at


def checkpoints(root: pathlib.Path) -> list[int]:
    """The steps_completed of the checkpoints under `root`, sorted."""
    return sorted(json.loads(m.read_text())["steps_completed"] for m in root.glob("*/metadata.json"))


def fit(
    root: pathlib.Path,
    trial_class: type[TinyTrial] = TinyTrial,
    preempt_at: int | None = None,
    **kwargs: Any,
) -> tuple[TinyTrial, Recorder, det_torch.PyTorchTrialContext]:
    with det_torch.init(hparams={}, exp_conf={"checkpoint_storage": str(root)}) as context:
        recorder = Recorder(context)
        recorder.preempt_at = preempt_at
        trial = trial_class(context)
        det_torch.Trainer(trial, context).fit(**kwargs)
    return trial, recorder, context


def test_training_metrics_are_averaged_over_each_period(tmp_path: pathlib.Path) -> None:
    trial, recorder, _ = fit(
        tmp_path,
        max_length=det_torch.Batch(10),
        reporting_period=det_torch.Batch(3),
        validation_period=det_torch.Batch(4),
    )
    # A period ends at every boundary: reports at 3, 6, 9, validations at 4 and 8, the end at 10.
    periods = [range(3), range(3, 4), range(4, 6), range(6, 8), range(8, 9), range(9, 10)]
    assert [steps for steps, _, _ in recorder.training] == [p.stop for p in periods]
    for (_, metrics, batch_metrics), period in zip(recorder.training, periods, strict=True):
        assert metrics["batch_idx"] == pytest.approx(sum(period) / len(period))
        assert metrics["loss"] == pytest.approx(sum(trial.losses[i] for i in period) / len(period))
        assert [b["batch_idx"] for b in batch_metrics] == list(period)
        assert [b["loss"] for b in batch_metrics] == [pytest.approx(trial.losses[i]) for i in period]


def test_validation_metrics_get_batches_and_epochs(tmp_path: pathlib.Path) -> None:
    _, recorder, _ = fit(tmp_path, max_length=det_torch.Batch(8), validation_period=det_torch.Batch(4))
    assert [steps for steps, _ in recorder.validation] == [4, 8]  # the end is not validated twice
    assert [(m["batches"], m["epochs"]) for _, m in recorder.validation] == [(4, 0), (8, 1)]
    assert all(isinstance(m["validation_loss"], float) for _, m in recorder.validation)


def test_validation_keeps_metrics_the_trial_names_batches_or_epochs(tmp_path: pathlib.Path) -> None:
    class OwnEpochs(TinyTrial):
        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            return {"epochs": 42.0}

    _, recorder, _ = fit(tmp_path, OwnEpochs, max_length=det_torch.Batch(2))
    assert recorder.validation == [(2, {"epochs": 42.0, "batches": 2})]


def test_evaluate_full_dataset_gets_the_validation_loader(tmp_path: pathlib.Path) -> None:
    class Full(TinyTrial):
        evaluate_batch = det_torch.PyTorchTrial.evaluate_batch  # type: ignore[assignment]

        def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
            assert isinstance(data_loader, torch.utils.data.DataLoader)
            return {"records": sum(len(x) for x, _ in data_loader)}

    _, recorder, _ = fit(tmp_path, Full, max_length=det_torch.Batch(2))
    assert recorder.validation == [(2, {"records": 8, "batches": 2, "epochs": 0})]


@pytest.mark.parametrize(("policy", "expected"), [("all", [4, 8, 10]), ("best", [4, 8, 10]), ("none", [10])])
def test_checkpoint_policies(tmp_path: pathlib.Path, policy: str, expected: list[int]) -> None:
    fit(
        tmp_path,
        max_length=det_torch.Batch(10),
        validation_period=det_torch.Batch(4),
        checkpoint_policy=policy,  # off-cluster "best" checkpoints after every validation
    )
    assert checkpoints(tmp_path) == expected


def test_checkpoint_period_and_no_duplicate_final_checkpoint(tmp_path: pathlib.Path) -> None:
    _, recorder, _ = fit(
        tmp_path,
        max_length=det_torch.Batch(10),
        checkpoint_period=det_torch.Batch(5),
        checkpoint_policy="none",
    )
    assert checkpoints(tmp_path) == [5, 10]
    assert [steps for steps, _ in recorder.validation] == [10]


def test_unknown_checkpoint_policy(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="checkpoint_policy must be one of"):
        fit(tmp_path, max_length=det_torch.Batch(1), checkpoint_policy="sometimes")


def test_max_length_is_required_off_cluster(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="needs max_length"):
        fit(tmp_path)


def test_epoch_lengths_and_epoch_indices(tmp_path: pathlib.Path) -> None:
    seen: list[tuple[int, int]] = []

    class Epochs(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            seen.append((epoch_idx, batch_idx))
            return super().train_batch(batch, epoch_idx, batch_idx)

    _, recorder, _ = fit(
        tmp_path, Epochs, max_length=det_torch.Epoch(2), validation_period=det_torch.Epoch(1)
    )
    assert seen == [(i // 6, i) for i in range(12)]
    assert [(s, m["epochs"]) for s, m in recorder.validation] == [(6, 1), (12, 2)]


def test_record_lengths_count_the_global_batch(tmp_path: pathlib.Path) -> None:
    trial, _, _ = fit(tmp_path, max_length=det_torch.Record(10))  # 4 records a batch: 3 batches
    assert sorted(trial.losses) == [0, 1, 2]


def test_preemption_at_a_boundary_checkpoints_and_returns(tmp_path: pathlib.Path) -> None:
    trial, recorder, context = fit(
        tmp_path,
        preempt_at=2,
        max_length=det_torch.Batch(20),
        reporting_period=det_torch.Batch(3),
        checkpoint_policy="none",
    )
    assert sorted(trial.losses) == list(range(6))
    assert checkpoints(tmp_path) == [6]
    assert recorder.validation == []
    assert context.get_stop_requested()


def test_a_requested_stop_ends_training_at_the_next_boundary(tmp_path: pathlib.Path) -> None:
    class Stops(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            if batch_idx == 4:
                self.context.set_stop_requested(True)
            return super().train_batch(batch, epoch_idx, batch_idx)

    trial, _, _ = fit(
        tmp_path,
        Stops,
        max_length=det_torch.Batch(20),
        reporting_period=det_torch.Batch(3),
        checkpoint_policy="none",
    )
    assert sorted(trial.losses) == list(range(6))
    assert checkpoints(tmp_path) == [6]


def test_the_hot_path_asks_nothing_between_boundaries(tmp_path: pathlib.Path) -> None:
    gathers = []
    with det_torch.init(hparams={}, exp_conf={"checkpoint_storage": str(tmp_path)}) as context:
        recorder = Recorder(context)
        allgather = context.distributed.allgather

        def counting_allgather(stuff: Any) -> list[Any]:
            gathers.append(stuff)
            return allgather(stuff)

        context.distributed.allgather = counting_allgather  # type: ignore[method-assign]
        trial = TinyTrial(context)
        det_torch.Trainer(trial, context).fit(
            max_length=det_torch.Batch(20), reporting_period=det_torch.Batch(5), checkpoint_policy="none"
        )
    assert len(trial.losses) == 20
    assert recorder.preempt_calls == 4  # at batches 5, 10, 15 and 20
    # One gather of the period's metrics per boundary, then the final validation's and the
    # final checkpoint's generator states.
    assert len(gathers) == 4 + 2


def test_test_mode_trains_validates_and_checkpoints_once(tmp_path: pathlib.Path) -> None:
    evaluated = []

    class Counting(TinyTrial):
        def evaluate_batch(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            evaluated.append(batch_idx)
            return super().evaluate_batch(batch, batch_idx)

    trial, _, context = fit(tmp_path, Counting, test_mode=True, checkpoint_policy="all")
    assert sorted(trial.losses) == [0]
    assert evaluated == [0]
    assert checkpoints(tmp_path) == [1]
    assert context._test_mode


def test_the_test_mode_variable_overrides_the_scripts_length(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_TEST_MODE", "1")  # as `det experiment create --test-mode` sets it
    trial, _, _ = fit(tmp_path, max_length=det_torch.Batch(20), checkpoint_policy="all")
    assert sorted(trial.losses) == [0]
    assert checkpoints(tmp_path) == [1]


def test_step_zero_validation(tmp_path: pathlib.Path) -> None:
    _, recorder, _ = fit(
        tmp_path, max_length=det_torch.Batch(2), step_zero_validation=True, checkpoint_policy="none"
    )
    assert [steps for steps, _ in recorder.validation] == [0, 2]


def test_a_trial_must_override_one_evaluation_method(tmp_path: pathlib.Path) -> None:
    class Both(TinyTrial):
        def evaluate_full_dataset(self, data_loader: Any) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match="exactly one of evaluate_batch and evaluate_full_dataset"):
        fit(tmp_path, Both, max_length=det_torch.Batch(1))


def test_off_cluster_init_without_a_config(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    with det_torch.init(hparams={"lr": 0.1}) as context:
        assert context.get_hparam("lr") == 0.1
        trial = TinyTrial(context)
        det_torch.Trainer(trial, context).fit(max_length=det_torch.Batch(3))
    storage = tmp_path / "determined" / "checkpoints"
    assert checkpoints(storage) == [3]
    [checkpoint] = [p for p in storage.iterdir() if p.name != "tensorboard"]
    assert {p.name for p in checkpoint.iterdir()} == {
        "state_dict.pth",
        "load_data.json",
        "metadata.json",
        "code",
    }
    load_data = json.loads((checkpoint / "load_data.json").read_text())
    assert load_data == {
        "trial_type": "PyTorchTrial",
        "experiment_config": {},
        "hparams": {"lr": 0.1},
        "trial_cls_spec": "pytorch_trials:TinyTrial",
        "is_trainer": True,
    }
    assert (checkpoint / "code" / "pytorch_trials.py").is_file()
    metadata = json.loads((checkpoint / "metadata.json").read_text())
    assert metadata["framework"] == f"torch-{torch.__version__}"
    assert metadata["format"] == "pickle"
    state = _state.read_state(checkpoint)
    assert state["batches_trained"] == 3 and len(state["models_state_dict"]) == 1


def test_the_chief_writes_tensorboard_scalars(tmp_path: pathlib.Path) -> None:
    with det_torch.init(hparams={}, exp_conf={"checkpoint_storage": str(tmp_path)}) as context:
        path = context._core.train.get_tensorboard_path()
        det_torch.Trainer(TinyTrial(context), context).fit(max_length=det_torch.Batch(4))
    assert path.is_relative_to(tmp_path)
    [events] = path.glob("*tfevents*")
    content = events.read_bytes()
    assert b"loss" in content and b"validation_loss" in content


def test_the_core_tensorboard_path_off_cluster(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with det.core.init(checkpoint_storage=str(tmp_path)) as core_context:
        path = core_context.train.get_tensorboard_path()
        assert path.parent == tmp_path / "tensorboard" and path.is_dir()
        assert core_context.train.get_tensorboard_path() == path
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = det.core.DummyTrainContext().get_tensorboard_path()
    assert default.parent == _checkpoint.default_storage_root() / "tensorboard"


def test_no_tensorboard_files_when_logging_is_off(tmp_path: pathlib.Path) -> None:
    with det_torch.init(
        hparams={}, exp_conf={"checkpoint_storage": str(tmp_path)}, enable_tensorboard_logging=False
    ) as context:
        det_torch.Trainer(TinyTrial(context), context).fit(max_length=det_torch.Batch(2))
    assert list(tmp_path.glob("tensorboard/**/*tfevents*")) == []


def test_plain_loss_tensor_is_reported_as_loss(tmp_path: pathlib.Path) -> None:
    class PlainLoss(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> Any:
            x, y = batch
            loss = F.mse_loss(self.model(x), y)
            self.context.backward(loss)
            self.context.step_optimizer(self.optimizer)
            return loss

    _, recorder, _ = fit(tmp_path, PlainLoss, max_length=det_torch.Batch(2))
    assert list(recorder.training[0][1]) == ["loss"]
