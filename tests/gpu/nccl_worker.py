"""One worker of `test_cuda_paths.py::test_nccl_allreduce_through_the_launcher`, started by
`python3 -m determined.launch.torch_distributed -- python3 nccl_worker.py RESULT.json`.

It builds its PyTorchTrialContext with `det.pytorch.init()` as a trial script does, so the
process group comes from our path (USE_TORCH_DISTRIBUTED: nccl when torch sees CUDA, else
gloo), then allreduces a tensor on the context's device and allgathers the ranks through
our own collectives (DistributedContext). What it saw goes to RESULT.json as JSON.
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import determined.pytorch as det_torch

# The launcher reads the task's variables (it refuses to run off a cluster); this worker then
# trains off-cluster, so that it needs no master: without these two, get_cluster_info() is None.
LAUNCHER_ONLY = ("DET_MASTER", "DET_ALLOCATION_ID")


def main(result_file: Path) -> None:
    for name in LAUNCHER_ONLY:
        os.environ.pop(name, None)
    with det_torch.init(hparams={}, exp_conf={}, enable_tensorboard_logging=False) as context:
        rank = context.distributed.rank
        tensor = torch.full((4,), float(rank + 1), device=context.device)
        dist.all_reduce(tensor)
        result = {
            "backend": str(dist.get_backend()),
            "world_size": dist.get_world_size(),
            "device": str(tensor.device),
            "allreduced": tensor.tolist(),
            "allgathered_ranks": context.distributed.allgather(rank),
        }
    result_file.write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
