"""The harness's distributed pieces without torch: the collectives of DistributedContext
(real sockets, several threads or processes on localhost), the gang's ports, the
container fields of ClusterInfo, and the launchers' command lines."""

import multiprocessing
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from support.distributed_ranks import context, free_port_pair, run_ranks

import determined as det
from determined.common.ports import PORT_BASE, PORT_SPAN, allocation_ports
from determined.core import _distributed
from determined.core._distributed import CollectiveError, DistributedContext
from determined.launch import parse_args, torch_distributed, wrap_rank


@pytest.mark.parametrize("force_tcp", [False, True])
def test_collectives_return_every_ranks_value_in_rank_order(force_tcp: bool) -> None:
    ports = free_port_pair()

    def work(rank: int) -> Any:
        ctx = context(rank, 4, 2, ports, force_tcp=force_tcp)
        try:
            return (
                ctx.allgather({"rank": rank}),
                ctx.gather(rank * 10),
                ctx.broadcast(f"from {rank}"),
                ctx.allgather_local(rank),
                ctx.gather_local(rank),
                ctx.broadcast_local(rank),
                ctx.allgather([rank] * 3),  # a second round on the same connections
            )
        finally:
            ctx.close()

    results = run_ranks(4, work)
    everyone = [{"rank": r} for r in range(4)]
    assert results[0] == (
        everyone,
        [0, 10, 20, 30],
        "from 0",
        [0, 1],
        [0, 1],
        0,
        [[0] * 3, [1] * 3, [2] * 3, [3] * 3],
    )
    assert results[1] == (everyone, None, "from 0", [0, 1], None, 0, [[0] * 3, [1] * 3, [2] * 3, [3] * 3])
    assert results[2] == (everyone, None, "from 0", [2, 3], [2, 3], 2, [[0] * 3, [1] * 3, [2] * 3, [3] * 3])
    assert results[3][3:6] == ([2, 3], None, 2)


def test_large_objects_travel_whole() -> None:
    ports = free_port_pair()
    blob = os.urandom(3 * 1024 * 1024)

    def work(rank: int) -> Any:
        ctx = context(rank, 2, 1, ports)
        try:
            return ctx.allgather(blob if rank == 1 else b"")
        finally:
            ctx.close()

    results = run_ranks(2, work)
    assert results[0] == results[1] == [b"", blob]


def _process_rank(rank: int, ports: tuple[int, int], queue: "multiprocessing.Queue[Any]") -> None:
    ctx = context(rank, 3, 1, ports)
    queue.put((rank, ctx.allgather(os.getpid()), ctx.broadcast(rank)))
    ctx.close()


def test_collectives_between_processes() -> None:
    ports = free_port_pair()
    spawn = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue[Any] = spawn.Queue()
    processes = [spawn.Process(target=_process_rank, args=(rank, ports, queue)) for rank in range(3)]
    for process in processes:
        process.start()
    results = sorted(queue.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(timeout=10)
    pids = [process.pid for process in processes]
    assert results == [(rank, pids, 0) for rank in range(3)]


def test_a_single_process_needs_no_peer() -> None:
    ctx = det.core.DummyDistributedContext()
    assert (ctx.allgather(1), ctx.gather(2), ctx.broadcast(3)) == ([1], [2], 3)
    assert (ctx.allgather_local(4), ctx.gather_local(5), ctx.broadcast_local(6)) == ([4], [5], 6)
    ctx.close()


def test_a_worker_that_exits_fails_the_chiefs_collective() -> None:
    ports = free_port_pair()

    def work(rank: int) -> Any:
        ctx = context(rank, 3, 1, ports)
        ctx.allgather(rank)
        if rank == 2:
            ctx.close()  # as if the process ended
            return "gone"
        try:
            return ctx.allgather(rank)
        finally:
            ctx.close()

    results = run_ranks(3, work)
    assert isinstance(results[0], CollectiveError)
    assert "rank 2 of the global collectives is gone" in str(results[0])
    # Rank 1 waits on the chief, which closed the connections as it failed.
    assert isinstance(results[1], CollectiveError) and "the chief" in str(results[1])


def test_a_worker_without_its_chief_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_distributed, "CONNECT_TIMEOUT_S", 0.3)
    ctx = context(1, 2, 1, free_port_pair())
    with pytest.raises(CollectiveError, match="could not reach the chief of the global collectives"):
        ctx.allgather(1)


def test_a_chief_without_its_workers_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_distributed, "CONNECT_TIMEOUT_S", 0.3)
    ctx = context(0, 3, 1, free_port_pair())
    with pytest.raises(CollectiveError, match=r"ranks \[1, 2\] of the global collectives did not connect"):
        ctx.gather(1)
    ctx.close()


def test_a_stranger_cannot_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection with another allocation's token, or a hello that is no hello, is dropped;
    the real worker still gets in."""
    monkeypatch.setenv("DET_SESSION_TOKEN", "secret")
    ports = free_port_pair()
    chief = context(0, 2, 1, ports)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(value=chief.allgather("chief")), daemon=True)
    thread.start()
    monkeypatch.setenv("DET_SESSION_TOKEN", "other")
    stranger = context(1, 2, 1, ports)
    stranger.gather("stranger")  # sent on a connection the chief closes unread
    with socket.create_connection(("127.0.0.1", ports[0])) as garbage:
        garbage.sendall(b"\xff" * 64)
    monkeypatch.setenv("DET_SESSION_TOKEN", "secret")
    worker = context(1, 2, 1, ports)
    assert worker.allgather("worker") == ["chief", "worker"]
    thread.join(timeout=10)
    assert result["value"] == ["chief", "worker"]
    for ctx in (chief, stranger, worker):
        ctx.close()


def test_collectives_after_close_are_refused() -> None:
    ctx = context(1, 2, 1, free_port_pair())
    ctx.close()
    with pytest.raises(RuntimeError, match="closed"):
        ctx.broadcast(1)


def test_ports_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_1", "30001")
    monkeypatch.setenv("INTER_TRAIN_PROCESS_COMM_PORT_2", "30002")
    ctx = DistributedContext(rank=0, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1)
    assert (ctx.pub_port, ctx.pull_port) == (30001, 30002)
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_1")
    monkeypatch.delenv("INTER_TRAIN_PROCESS_COMM_PORT_2")
    ctx = DistributedContext(
        rank=0, size=2, local_rank=0, local_size=2, cross_rank=0, cross_size=1, port_offset=5
    )
    assert (ctx.pub_port, ctx.pull_port) == (12365, 12381)


def test_allocation_ports_are_deterministic_distinct_and_in_range() -> None:
    seen = set()
    for i in range(2000):
        ports = allocation_ports(f"{i}.1")
        assert ports == allocation_ports(f"{i}.1")
        assert ports[1] == ports[0] + 1 and ports[2] == ports[0] + 2
        assert ports[0] >= PORT_BASE and ports[2] < PORT_BASE + PORT_SPAN
        seen.add(ports[0])
    assert len(seen) > 1900  # spread, not clustered


def test_two_clusters_put_their_first_allocation_on_different_ports() -> None:
    """Every cluster numbers allocations from 1.1; on one host they must not meet on one port."""
    firsts = {allocation_ports("1.1", f"cluster-{n}")[0] for n in range(50)}
    assert len(firsts) > 45
    assert allocation_ports("1.1", "cluster-1") == allocation_ports("1.1", "cluster-1")


def cluster_env(**extra: str) -> dict[str, str]:
    return {
        "DET_MASTER": "http://127.0.0.1:1",
        "DET_CLUSTER_ID": "c1",
        "DET_AGENT_ID": "agent-1",
        "DET_SLOT_IDS": "[0, 1]",
        "DET_TASK_ID": "7",
        "DET_ALLOCATION_ID": "7.1",
        "DET_SESSION_TOKEN": "tok",
        "DET_TASK_TYPE": "COMMAND",
        **extra,
    }


def test_cluster_info_describes_the_gang() -> None:
    info = det.ClusterInfo._from_env(
        cluster_env(
            DET_CONTAINER_ADDRS='["10.0.0.1", "10.0.0.2"]',
            DET_CONTAINER_RANK="1",
            DET_CONTAINER_SLOT_COUNTS="[2, 2]",
        )
    )
    assert (info.container_addrs, info.container_rank, info.container_slot_counts) == (
        ["10.0.0.1", "10.0.0.2"],
        1,
        [2, 2],
    )
    alone = det.ClusterInfo._from_env(cluster_env())
    assert (alone.container_addrs, alone.container_rank, alone.container_slot_counts) == (
        ["127.0.0.1"],
        0,
        [2],
    )


def test_launcher_arguments_split_on_the_first_double_dash(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["python3", "train.py", "--lr", "1"], "x") == ([], ["python3", "train.py", "--lr", "1"])
    assert parse_args(["--nproc_per_node", "1", "--", "python3", "t.py"], "x") == (
        ["--nproc_per_node", "1"],
        ["python3", "t.py"],
    )
    for argv, message in ((["--"], "empty script"), (["--", "--trial", "m:C", "t.py"], "not both")):
        with pytest.raises(SystemExit):
            parse_args(argv, "x")
        assert message in capsys.readouterr().err


def test_torchrun_command_for_one_container_of_two() -> None:
    info = det.ClusterInfo._from_env(
        cluster_env(DET_CONTAINER_ADDRS='["10.0.0.1", "10.0.0.2"]', DET_CONTAINER_RANK="1")
    )
    command = torch_distributed.torchrun_command(info, ["--log_dir", "/tmp/x"], ["python3", "t.py"], 29555)
    assert command[1:] == [
        "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2", "--node_rank", "1",
        "--max_restarts", "0", "--rdzv_backend", "static", "--master_addr", "10.0.0.1",
        "--master_port", "29555", "--log_dir", "/tmp/x",
        "--module", "determined.launch.wrap_rank", "RANK", "--", "python3", "t.py",
    ]  # fmt: skip
    alone = det.ClusterInfo._from_env(cluster_env())
    assert "localhost" in torch_distributed.torchrun_command(alone, [], ["x"], 1)


def test_the_launcher_refuses_to_run_off_cluster() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    result = subprocess.run(
        [sys.executable, "-m", "determined.launch.torch_distributed", "python3", "t.py"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0 and "must run on a Determined cluster" in result.stderr


def test_wrap_rank_tags_every_line_and_keeps_the_exit_code(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(
        "import sys\n"
        "print('one'); print('two', flush=True)\n"
        "sys.stderr.write('err\\rprogress\\npartial'); sys.exit(3)\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "determined.launch.wrap_rank",
            "NOPE,MY_RANK",
            "--",
            sys.executable,
            str(script),
        ],
        env={**os.environ, "MY_RANK": "5"},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3
    assert result.stdout == b"[rank=5] one\n[rank=5] two\n"
    assert result.stderr == b"[rank=5] err\r[rank=5] progress\n[rank=5] partial"


def test_wrap_rank_takes_a_literal_rank_and_reports_signals() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "determined.launch.wrap_rank",
            "2",
            "--",
            "sh",
            "-c",
            "echo hi; kill -TERM $$",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stdout) == (128 + 15, "[rank=2] hi\n")
    assert wrap_rank.resolve_rank("0") == 0
    with pytest.raises(ValueError, match="none of the rank variables"):
        wrap_rank.resolve_rank("NO_SUCH_RANK_VAR")


def test_the_launchers_import_no_torch() -> None:
    code = (
        "import sys, determined.launch.torch_distributed, determined.launch.wrap_rank, determined.common.ports\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_wrap_ranks_command_dies_with_it() -> None:
    wrapper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "determined.launch.wrap_rank",
            "0",
            "--",
            "sh",
            "-c",
            "echo $$; exec sleep 60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert wrapper.stdout is not None
    child = int(wrapper.stdout.readline().removeprefix("[rank=0] "))
    wrapper.kill()
    wrapper.wait()
    deadline = time.monotonic() + 10
    while _alive(child):
        assert time.monotonic() < deadline, "the command outlived wrap_rank"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in status
