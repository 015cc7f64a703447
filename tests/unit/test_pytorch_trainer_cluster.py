"""The Trainer on a cluster, against the in-process gateway (`core_gateway`): what it
reports, the checkpoints it stores, preemption, resuming from the trial's latest checkpoint,
the checkpoint policies against the experiment's best, and the deprecated searcher length."""

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from pytorch_trials import TinyTrial
from support.core_gateway import ALLOCATION_ID, FakeGateway, Server, set_trial_env, wait_for

import determined as det
import determined.pytorch as det_torch

SEARCHER = {"name": "single", "metric": "validation_loss", "smaller_is_better": True}


# Exact comparisons of losses need one thread (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def storage(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """The checkpoint storage; the working directory (the context a checkpoint copies) is a
    small folder of its own."""
    context_dir = tmp_path / "context"
    context_dir.mkdir()
    (context_dir / "model_def.py").write_text("# the experiment's code\n")
    monkeypatch.chdir(context_dir)
    yield tmp_path / "storage"
    det.get_cluster_info.cache_clear()


def on_cluster(
    monkeypatch: pytest.MonkeyPatch, gateway: Server, storage: pathlib.Path, **config: Any
) -> None:
    full_config = {
        "checkpoint_storage": {"type": "directory", "container_path": str(storage)},
        "searcher": SEARCHER,
        **config,
    }
    set_trial_env(monkeypatch, gateway.port, full_config, DET_HPARAMS='{"optimizer": "sgd"}')


def fit(trial_class: type[TinyTrial] = TinyTrial, **kwargs: Any) -> TinyTrial:
    with det_torch.init() as context:
        trial = trial_class(context)
        det_torch.Trainer(trial, context).fit(**kwargs)
    return trial


def groups(fake: FakeGateway, group: str) -> list[tuple[int, dict[str, Any]]]:
    return [(steps, metrics) for g, steps, metrics in fake.reports() if g == group]


def test_reports_checkpoints_and_tensorboard(
    gateway: Server, fake: FakeGateway, storage: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, storage)
    trial = fit(
        max_length=det_torch.Batch(6),
        validation_period=det_torch.Batch(3),
        reporting_period=det_torch.Batch(2),
        checkpoint_policy="all",
    )
    assert trial.context.get_hparams() == {"optimizer": "sgd"}
    assert [steps for steps, _ in groups(fake, "training")] == [2, 3, 4, 6]
    assert groups(fake, "training")[0][1]["loss"] == pytest.approx((trial.losses[0] + trial.losses[1]) / 2)
    validations = groups(fake, "validation")
    assert [(steps, m["batches"], m["epochs"]) for steps, m in validations] == [(3, 3, 0), (6, 6, 1)]
    assert [c.steps_completed for c in fake.checkpoints] == [3, 6]
    for report in fake.checkpoints:
        metadata = json.loads(report.metadata_json)
        assert metadata["steps_completed"] == report.steps_completed
        assert metadata["framework"] == f"torch-{torch.__version__}"
        assert (storage / report.uuid / "state_dict.pth").is_file()
        assert (storage / report.uuid / "code" / "model_def.py").is_file()
        load_data = json.loads((storage / report.uuid / "load_data.json").read_text())
        assert load_data["hparams"] == {"optimizer": "sgd"}
        assert load_data["experiment_config"]["searcher"] == SEARCHER
    assert fake.progress[-1] == 1.0
    tensorboard = storage / "tensorboard" / "experiment" / "3" / "trial" / "7"
    assert len(list(tensorboard.glob("*tfevents*"))) == 1


@pytest.mark.parametrize(("best", "expected"), [(None, [3, 6]), (1e9, [3, 6]), (0.0, [6])])
def test_the_best_policy_checkpoints_what_beats_the_experiment(
    gateway: Server,
    fake: FakeGateway,
    storage: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    best: float | None,
    expected: list[int],
) -> None:
    on_cluster(monkeypatch, gateway, storage)
    fake.best = best
    fit(max_length=det_torch.Batch(6), validation_period=det_torch.Batch(3))
    assert [c.steps_completed for c in fake.checkpoints] == expected  # the end is checkpointed once


class StopAsked(det_torch.PyTorchCallback):
    """The cluster asks the trial to stop when batches 0..2 are reported (and waits until
    the watcher has seen it)."""

    def __init__(self, context: det_torch.PyTorchTrialContext, fake: FakeGateway) -> None:
        self.context = context
        self.fake = fake

    def on_training_workload_end(self, avg_metrics: dict[str, Any], batch_metrics: Any) -> None:
        if self.context.current_train_batch() == 2:
            self.fake.update(stop=True, reason="preempted")
            watcher = self.context._core._watcher
            assert watcher is not None
            wait_for(lambda: watcher.state().stop)


def test_preemption_checkpoints_and_the_next_run_resumes_there(
    gateway: Server, fake: FakeGateway, storage: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, storage)

    class Preempted(TinyTrial):
        def build_callbacks(self) -> dict[str, det_torch.PyTorchCallback]:
            return {"stop": StopAsked(self.context, fake)}

    first = fit(Preempted, max_length=det_torch.Batch(8), reporting_period=det_torch.Batch(3))
    # Asked while batch 3's boundary reports: the same boundary checkpoints and returns.
    assert sorted(first.losses) == [0, 1, 2]
    [checkpoint] = fake.checkpoints
    assert checkpoint.steps_completed == 3
    assert fake.acks == [ALLOCATION_ID]
    assert groups(fake, "validation") == []

    fake.update(stop=False)
    on_cluster(monkeypatch, gateway, storage)
    monkeypatch.setenv("DET_LATEST_CHECKPOINT", checkpoint.uuid)
    det.get_cluster_info.cache_clear()
    rest = fit(max_length=det_torch.Batch(8), reporting_period=det_torch.Batch(3))
    assert sorted(rest.losses) == [3, 4, 5, 6, 7]
    assert [c.steps_completed for c in fake.checkpoints] == [3, 8]
    assert [steps for steps, _ in groups(fake, "validation")] == [8]


def test_a_requested_stop_checkpoints_and_ends_the_trial(
    gateway: Server, fake: FakeGateway, storage: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, storage)

    class Stops(TinyTrial):
        def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
            self.context.set_stop_requested(batch_idx == 1)
            return super().train_batch(batch, epoch_idx, batch_idx)

    trial = fit(Stops, max_length=det_torch.Batch(8), reporting_period=det_torch.Batch(2))
    assert sorted(trial.losses) == [0, 1]
    assert [c.steps_completed for c in fake.checkpoints] == [2]
    assert fake.early_exits == []
    assert fake.acks == []  # not a preemption: exiting 0 then means done


def test_the_deprecated_searcher_length_drives_training(
    gateway: Server, fake: FakeGateway, storage: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, storage, searcher={**SEARCHER, "max_length": {"epochs": 1}})
    with pytest.warns(FutureWarning, match="searcher.max_length is deprecated"):
        trial = fit(reporting_period=det_torch.Batch(4))
    assert sorted(trial.losses) == list(range(6))  # an epoch: 24 records in batches of 4
    assert [steps for steps, _ in groups(fake, "validation")] == [6]
    assert [c.steps_completed for c in fake.checkpoints] == [6]
    assert fake.progress[-1] == 1.0


def test_the_core_tensorboard_path_is_in_the_checkpoint_storage(
    gateway: Server, storage: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, storage)
    with det.core.init() as core_context:
        expected = storage / "tensorboard" / "experiment" / "3" / "trial" / "7"
        assert not expected.exists()  # made when asked for
        assert core_context.train.get_tensorboard_path() == expected
        assert expected.is_dir()
