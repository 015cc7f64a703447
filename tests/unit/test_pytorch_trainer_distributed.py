"""The Trainer with two workers (threads of this process, collectives over localhost): the
data is sharded, training metrics are averaged over both workers, validation covers both
shards, and only the chief stores checkpoints, with both workers' generator states."""

import json
import pathlib
from typing import Any

import pytest
from pytorch_trials import BATCH_SIZE, TinyTrial, dataset
from support.distributed_ranks import context, free_port_pair, run_ranks

import determined.pytorch as det_torch
from determined.pytorch import _state

# Exact comparisons of losses need one thread (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


class Sequential(TinyTrial):
    """No shuffling: both threads share torch's generator, so a shuffle seed could differ."""

    def build_training_data_loader(self) -> det_torch.DataLoader:
        return det_torch.DataLoader(dataset(0), batch_size=BATCH_SIZE)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        self.first_records = getattr(self, "first_records", [])
        self.first_records.append(batch[0][0].tolist())
        return super().train_batch(batch, epoch_idx, batch_idx)


def test_two_workers(tmp_path: pathlib.Path) -> None:
    ports = free_port_pair()
    reports: dict[str, list[tuple[int, dict[str, Any]]]] = {"training": [], "validation": []}

    def work(rank: int) -> Sequential:
        exp_conf = {"checkpoint_storage": str(tmp_path)}
        with det_torch.init(hparams={}, exp_conf=exp_conf, distributed=context(rank, 2, 1, ports)) as ctx:
            if rank == 0:
                train = ctx._core.train
                train.report_training_metrics = (  # type: ignore[method-assign]
                    lambda steps, metrics, batch_metrics=None: reports["training"].append((steps, metrics))
                )
                train.report_validation_metrics = (  # type: ignore[method-assign]
                    lambda steps, metrics: reports["validation"].append((steps, metrics))
                )
            trial = Sequential(ctx)
            det_torch.Trainer(trial, ctx).fit(
                max_length=det_torch.Batch(4), reporting_period=det_torch.Batch(2), checkpoint_policy="none"
            )
        return trial

    results = run_ranks(2, work)
    chief, worker = results[0], results[1]
    assert isinstance(chief, Sequential) and isinstance(worker, Sequential), results
    assert sorted(chief.losses) == sorted(worker.losses) == [0, 1, 2, 3]
    # Batches of 4 records in a pass of 6 batches: rank 0 reads batches 0, 2, 4, rank 1 reads 1, 3, 5.
    records = dataset(0).tensors[0]
    assert chief.first_records[:3] == [records[i * BATCH_SIZE].tolist() for i in (0, 2, 4)]
    assert worker.first_records[:3] == [records[i * BATCH_SIZE].tolist() for i in (1, 3, 5)]
    assert [steps for steps, _ in reports["training"]] == [2, 4]
    both = [chief.losses[0], chief.losses[1], worker.losses[0], worker.losses[1]]
    assert reports["training"][0][1]["loss"] == pytest.approx(sum(both) / 4)
    [(steps, validation)] = reports["validation"]
    assert (steps, validation["batches"], validation["epochs"]) == (4, 4, 1)
    [metadata_file] = tmp_path.glob("*/metadata.json")
    assert json.loads(metadata_file.read_text())["steps_completed"] == 4
    assert len(_state.read_state(metadata_file.parent)["rng_states"]) == 2
