"""Resume fidelity: pausing after k batches and resuming in a fresh context gives exactly
the losses and weights of an uninterrupted run (CPU, one thread), with shuffled data,
dropout, optimizer state, a per-batch LR scheduler, validations in between, and an epoch
boundary on either side of the pause."""

import json
import pathlib
from typing import Any

import pytest
import torch
from pytorch_trials import TinyTrial

import determined.pytorch as det_torch

TOTAL = 10  # batches; an epoch is 6


# Exact comparisons of losses need one thread (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def checkpoints(root: pathlib.Path) -> dict[int, str]:
    """steps_completed -> storage_id of the checkpoints under `root`."""
    found = {}
    for metadata in root.glob("*/metadata.json"):
        found[json.loads(metadata.read_text())["steps_completed"]] = metadata.parent.name
    return found


def train(
    root: pathlib.Path, optimizer: str, max_batches: int, latest_checkpoint: str | None = None, **fit: Any
) -> TinyTrial:
    """One run, as a new process would do it: init seeds, then the trial is built."""
    exp_conf = {"checkpoint_storage": str(root)}
    with det_torch.init(hparams={"optimizer": optimizer}, exp_conf=exp_conf) as context:
        trial = TinyTrial(context)
        det_torch.Trainer(trial, context).fit(
            max_length=det_torch.Batch(max_batches),
            validation_period=det_torch.Batch(4),
            reporting_period=det_torch.Batch(3),
            checkpoint_policy="none",
            latest_checkpoint=latest_checkpoint,
            **fit,
        )
    return trial


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("pause_at", [3, 6, 7])
def test_a_paused_and_resumed_run_matches_an_uninterrupted_one(
    tmp_path: pathlib.Path, optimizer: str, pause_at: int
) -> None:
    whole = train(tmp_path / "whole", optimizer, TOTAL)
    first = train(tmp_path / "paused", optimizer, pause_at)
    storage_id = checkpoints(tmp_path / "paused")[pause_at]
    rest = train(tmp_path / "paused", optimizer, TOTAL, latest_checkpoint=storage_id)

    assert sorted(first.losses) == list(range(pause_at))
    assert sorted(rest.losses) == list(range(pause_at, TOTAL))
    assert {**first.losses, **rest.losses} == whole.losses  # exact equality
    for resumed, uninterrupted in zip(rest.weights(), whole.weights(), strict=True):
        assert torch.equal(resumed, uninterrupted)
    assert rest.scheduler.get_last_lr() == whole.scheduler.get_last_lr()


def test_resuming_twice_from_the_same_checkpoint_is_repeatable(tmp_path: pathlib.Path) -> None:
    train(tmp_path, "sgd", 4)
    storage_id = checkpoints(tmp_path)[4]
    a = train(tmp_path, "sgd", 8, latest_checkpoint=storage_id)
    b = train(tmp_path, "sgd", 8, latest_checkpoint=storage_id)
    assert a.losses == b.losses


def test_a_checkpoint_restores_the_batches_trained_and_callbacks(tmp_path: pathlib.Path) -> None:
    class Counter(det_torch.PyTorchCallback):
        def __init__(self) -> None:
            self.epochs_ended = 0
            self.startup: tuple[int, str | None] | None = None

        def on_trial_startup(self, first_batch_idx: int, checkpoint_uuid: str | None) -> None:
            self.startup = (first_batch_idx, checkpoint_uuid)

        def on_training_epoch_end(self, epoch_idx: int) -> None:
            self.epochs_ended += 1

        def state_dict(self) -> dict[str, Any]:
            return {"epochs_ended": self.epochs_ended}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.epochs_ended = state_dict["epochs_ended"]

    counters: list[Counter] = []

    class CountingTrial(TinyTrial):
        def build_callbacks(self) -> dict[str, det_torch.PyTorchCallback]:
            counters.append(Counter())
            return {"counter": counters[-1]}

    def run(max_batches: int, latest: str | None) -> None:
        with det_torch.init(hparams={}, exp_conf={"checkpoint_storage": str(tmp_path)}) as context:
            det_torch.Trainer(CountingTrial(context), context).fit(
                max_length=det_torch.Batch(max_batches), latest_checkpoint=latest
            )

    run(7, None)
    storage_id = checkpoints(tmp_path)[7]
    run(13, storage_id)
    assert counters[0].startup == (0, None)
    assert counters[1].startup == (7, storage_id)
    assert counters[1].epochs_ended == 2  # one restored, one more at batch 12
