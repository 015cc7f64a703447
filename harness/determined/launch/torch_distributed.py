"""`python3 -m determined.launch.torch_distributed [TORCHRUN_OVERRIDES... --] SCRIPT...`

Runs torch's own launcher (torchrun) for this container: one worker per slot of this
agent, node rank = the container's rank, static rendezvous at the chief's address on
C10D_PORT (the same on every agent of the gang: `determined.common.ports`). Each worker
runs `python3 -m determined.launch.wrap_rank RANK -- SCRIPT...`, so its log lines carry
its rank; the script calls `dist.init_process_group("gloo" or "nccl")` and
`det.core.DistributedContext.from_torch_distributed()`.

With `--max_restarts 0`, a worker that fails makes torchrun stop this container's other
workers and exit non-zero; the other containers' workers then fail too as their
collectives lose a peer, and the cluster kills what is left of the gang when any
container exits non-zero. The launcher execs torchrun, so the agent's signals reach it
directly and torchrun passes them on to the workers.
"""

import os
import sys

from determined import _info, launch

DEFAULT_C10D_PORT = 29400


def torchrun_command(
    info: _info.ClusterInfo, overrides: list[str], script: list[str], c10d_port: int
) -> list[str]:
    """The torchrun command line for this container."""
    containers = len(info.container_addrs)
    master_addr = "localhost" if containers == 1 else info.container_addrs[0]
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(containers),
        "--nproc_per_node", str(max(1, len(info.slot_ids))),
        "--node_rank", str(info.container_rank),
        "--max_restarts", "0",
        "--rdzv_backend", "static",
        "--master_addr", master_addr,
        "--master_port", str(c10d_port),
        *overrides,
        "--module", "determined.launch.wrap_rank", "RANK", "--", *script,
    ]  # fmt: skip


def main(argv: list[str]) -> None:
    prog = "python3 -m determined.launch.torch_distributed"
    overrides, script = launch.parse_args(argv, prog)
    info = launch.cluster_info(prog)
    command = torchrun_command(info, overrides, script, int(os.environ.get("C10D_PORT") or DEFAULT_C10D_PORT))
    env = {**os.environ, "USE_TORCH_DISTRIBUTED": "True", "DET_CHIEF_IP": info.container_addrs[0]}
    sys.stdout.flush()
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
