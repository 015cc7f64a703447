"""Distributed training with the Core API and torch's DistributedDataParallel: fits
y = 3x + 1 with one worker per slot (gloo on CPU, nccl on GPU), started by

    entrypoint: python3 -m determined.launch.torch_distributed python3 train_ddp.py

The launcher runs torch's own launcher on every agent of the trial with the rendezvous at
the chief; each worker joins the process group, then builds Determined's DistributedContext
from the variables torch set. Every worker trains on its own shard of each batch and DDP
averages the gradients; only the chief (rank 0) reports metrics and stores checkpoints,
and all workers decide together when the cluster asks them to stop.
"""

import json
import logging
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import determined as det

logger = logging.getLogger("distributed")

STEPS = 40
VALIDATE_EVERY = 10


def batch(generator: torch.Generator, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(size, 1, generator=generator) * 2 - 1
    return x, 3.0 * x + 1.0 + 0.1 * torch.randn(size, 1, generator=generator)


def main(core_context: det.core.Context, learning_rate: float, global_batch_size: int) -> None:
    distributed = core_context.distributed
    # Every rank's (rank, node) pair, in rank order: proof that the gang is whole.
    layout = distributed.allgather((distributed.rank, distributed.cross_rank))
    print(
        f"worker {distributed.rank} of {distributed.size} on node {distributed.cross_rank} ready", flush=True
    )
    if distributed.rank == 0:
        logger.info("allgather returned %s", layout)

    device = (
        torch.device("cuda", distributed.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    )
    model = DistributedDataParallel(torch.nn.Linear(1, 1).to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
    start = 0
    info = det.get_cluster_info()
    latest = info.latest_checkpoint if info else None
    if latest is not None:
        with core_context.checkpoint.restore_path(latest) as path:
            model.module.load_state_dict(torch.load(Path(path) / "model.pt", map_location=device))
            start = json.loads((Path(path) / "state.json").read_text())["steps_completed"]
    per_worker = max(1, global_batch_size // distributed.size)
    generator = torch.Generator().manual_seed(1000 * distributed.rank + start)
    for step in range(start + 1, STEPS + 1):
        x, y = batch(generator, per_worker)
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # DDP all-reduces the gradients here
        optimizer.step()
        if distributed.rank == 0:
            core_context.train.report_training_metrics(steps_completed=step, metrics={"loss": loss.item()})
        if step % VALIDATE_EVERY == 0 or step == STEPS:
            if distributed.rank == 0:
                validate_and_save(core_context, model.module, step, len(layout))
            if core_context.preempt.should_preempt():  # the chief decides, every worker learns it
                return
    if distributed.rank == 0:
        logger.info("done: y = %.3f x + %.3f", model.module.weight.item(), model.module.bias.item())


def validate_and_save(
    core_context: det.core.Context, model: torch.nn.Module, step: int, workers: int
) -> None:
    with torch.no_grad():
        x, y = batch(torch.Generator().manual_seed(1), 1000)
        device = next(model.parameters()).device
        validation_loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).item()
    core_context.train.report_validation_metrics(
        steps_completed=step, metrics={"validation_loss": validation_loss, "workers": workers}
    )
    with core_context.checkpoint.store_path({"steps_completed": step}) as (path, _storage_id):
        torch.save(model.state_dict(), Path(path) / "model.pt")
        (Path(path) / "state.json").write_text(json.dumps({"steps_completed": step}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    info = det.get_cluster_info()
    hparams = info.trial.hparams if info else {"learning_rate": 0.1, "global_batch_size": 64}
    try:
        with det.core.init(distributed=det.core.DistributedContext.from_torch_distributed()) as core_context:
            main(core_context, float(hparams["learning_rate"]), int(hparams["global_batch_size"]))
    finally:
        dist.destroy_process_group()
