"""`python3 -m determined.launch.torch_distributed` for real: two simulated containers
(two launchers on localhost, as two agents of one allocation start them) with two slots
each, so torchrun starts 4 workers that rendezvous over gloo on CPU."""

import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

# Each test starts 2 torchruns and 4 workers that import torch: 20-40 s on a busy machine.
pytestmark = pytest.mark.slow

WORKER = """
import json, os, sys
import torch.distributed as dist
import determined as det

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    print("failing on purpose", flush=True)
    sys.exit(1)
torch_values = [None] * dist.get_world_size()
dist.all_gather_object(torch_values, rank * 10)
ctx = det.core.DistributedContext.from_torch_distributed()
values = ctx.allgather(rank * 100)
local = ctx.allgather_local(rank)
print("RESULT " + json.dumps({
    "rank": rank, "torch": torch_values, "det": values, "local": local,
    "cross_rank": ctx.cross_rank, "chief_ip": ctx.chief_ip,
    "use_torch_distributed": os.environ.get("USE_TORCH_DISTRIBUTED"),
}), flush=True)
ctx.close()
dist.destroy_process_group()
"""


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def start_launchers(tmp_path: pathlib.Path, **extra_env: str) -> list[subprocess.Popen[str]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    c10d, comm1, comm2 = free_ports(3)
    base = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DET_")},
        "DET_MASTER": "http://127.0.0.1:1",
        "DET_CLUSTER_ID": "c1",
        "DET_TASK_ID": "7",
        "DET_ALLOCATION_ID": "7.1",
        "DET_SESSION_TOKEN": "tok",
        "DET_TASK_TYPE": "COMMAND",
        "DET_SLOT_IDS": "[0, 1]",
        "DET_CONTAINER_ADDRS": '["127.0.0.1", "127.0.0.1"]',
        "DET_CONTAINER_SLOT_COUNTS": "[2, 2]",
        "C10D_PORT": str(c10d),
        "INTER_TRAIN_PROCESS_COMM_PORT_1": str(comm1),
        "INTER_TRAIN_PROCESS_COMM_PORT_2": str(comm2),
        "OMP_NUM_THREADS": "1",
        **extra_env,
    }
    return [
        subprocess.Popen(
            [sys.executable, "-m", "determined.launch.torch_distributed", sys.executable, str(script)],
            env={**base, "DET_AGENT_ID": f"agent-{rank}", "DET_CONTAINER_RANK": str(rank)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]


def finish(launchers: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    results = []
    for launcher in launchers:
        try:
            output, _ = launcher.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for other in launchers:
                other.kill()
            raise
        results.append((launcher.returncode, output))
    return results


def test_four_workers_on_two_containers_gather_every_rank(tmp_path: pathlib.Path) -> None:
    results = finish(start_launchers(tmp_path))
    for code, output in results:
        assert code == 0, output
    lines = [line for _, output in results for line in output.splitlines() if "RESULT " in line]
    by_rank = {}
    for line in lines:
        prefix, _, payload = line.partition("RESULT ")
        result = json.loads(payload)
        assert prefix == f"[rank={result['rank']}] "  # wrap_rank tagged the line
        by_rank[result["rank"]] = result
    assert sorted(by_rank) == [0, 1, 2, 3]
    for rank, result in by_rank.items():
        assert result["torch"] == [0, 10, 20, 30]
        assert result["det"] == [0, 100, 200, 300]
        assert result["local"] == ([0, 1] if rank < 2 else [2, 3])
        assert result["cross_rank"] == rank // 2
        assert (result["chief_ip"], result["use_torch_distributed"]) == ("127.0.0.1", "True")
    # Each container's launcher ran its own two workers.
    assert {
        json.loads(line.partition("RESULT ")[2])["rank"]
        for line in results[1][1].splitlines()
        if "RESULT " in line
    } == {2, 3}


@pytest.mark.parametrize("fail_rank", [1, 3])
def test_a_worker_that_exits_1_fails_every_launcher(tmp_path: pathlib.Path, fail_rank: int) -> None:
    results = finish(start_launchers(tmp_path, FAIL_RANK=str(fail_rank)))
    for code, output in results:
        assert code != 0, output
    assert f"[rank={fail_rank}] failing on purpose" in "".join(output for _, output in results)
