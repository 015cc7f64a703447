"""Two gloo workers: wrap_model gives DistributedDataParallel, and with gradient aggregation
the workers train exactly as one process on all their batches would."""

import multiprocessing
import pathlib
import socket
from typing import Any

import pytest
import torch

import determined as det
from determined.core import DummyTrainContext
from determined.pytorch import PyTorchTrialContext


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(4, 3, generator=generator), torch.randn(4, 1, generator=generator)) for _ in range(8)
    ]


def worker(rank: int, port: int, storage: str, results: Any) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    try:
        core_context = det.core.init(checkpoint_storage=storage)
        core_context.train = DummyTrainContext(pathlib.Path(storage) / "tb")
        context = PyTorchTrialContext(
            core_context, trial_seed=0, hparams={}, slots_per_trial=2, num_gpus=0, exp_conf={},
            aggregation_frequency=2, steps_completed=0, managed_training=True, debug_enabled=False,
        )  # fmt: skip
        torch.manual_seed(rank)  # different starting weights: DDP must give every rank rank 0's
        model = context.wrap_model(torch.nn.Linear(3, 1))
        optimizer = context.wrap_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
        for batch_idx, (x, y) in enumerate(batches()[rank::2]):
            context._current_batch_idx = batch_idx
            context.backward(torch.nn.functional.mse_loss(model(x), y))
            context.step_optimizer(optimizer)
        # Plain lists: a tensor would travel as shared memory that dies with this process.
        results.put((rank, type(model).__name__, [p.detach().tolist() for p in model.parameters()]))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_workers_aggregating_train_as_one_process_on_all_batches(tmp_path: pathlib.Path) -> None:
    torch.set_num_threads(1)
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    port = free_port()
    processes = [spawn.Process(target=worker, args=(rank, port, str(tmp_path), results)) for rank in range(2)]
    for process in processes:
        process.start()
    got = {rank: (kind, params) for rank, kind, params in (results.get(timeout=120) for _ in processes)}
    for process in processes:
        process.join(timeout=30)
        assert process.exitcode == 0

    # One process: rank 0's initial weights; each step on the 4 batches (2 per worker x 2 aggregated).
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = batches()
    for step in range(2):
        chunk = data[4 * step : 4 * step + 4]
        x, y = torch.cat([b[0] for b in chunk]), torch.cat([b[1] for b in chunk])
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    for rank in range(2):
        kind, params = got[rank]
        assert kind == "DistributedDataParallel"
        for param, want in zip(params, model.parameters(), strict=True):
            torch.testing.assert_close(torch.tensor(param), want.detach(), rtol=1e-5, atol=1e-6)
