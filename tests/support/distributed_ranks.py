"""Helpers of the distributed harness tests: DistributedContexts of several ranks on
localhost, run on threads."""

import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from determined.core._distributed import DistributedContext
from support.ports import free_port_run

# All ranks together must finish within this (generous: a loaded 2-core machine is slow).
HANG_S = 60.0


# With force_tcp, node i's local collectives listen on the pull port + i.
NODE_PORTS = 4


def free_port_pair() -> tuple[int, int]:
    """Two ports nothing listens on (pub, pull), and nothing on the NODE_PORTS - 1 after pull."""
    with socket.socket() as pub:
        pub.bind(("127.0.0.1", 0))
        return pub.getsockname()[1], free_port_run(NODE_PORTS)


def context(rank: int, size: int, nodes: int, ports: tuple[int, int], **kwargs: Any) -> DistributedContext:
    """Rank `rank` of `size` workers spread evenly over `nodes` nodes, all on localhost."""
    local_size = size // nodes
    return DistributedContext(
        rank=rank,
        size=size,
        local_rank=rank % local_size,
        local_size=local_size,
        cross_rank=rank // local_size,
        cross_size=nodes,
        chief_ip="127.0.0.1",
        pub_port=ports[0],
        pull_port=ports[1],
        **kwargs,
    )


def run_ranks(size: int, work: Callable[[int], Any]) -> dict[int, Any]:
    """Run work(rank) on one thread per rank; each rank's result, or the exception it raised."""
    results: dict[int, Any] = {}

    def run(rank: int) -> None:
        try:
            results[rank] = work(rank)
        except Exception as error:  # noqa: BLE001 - the test inspects it
            results[rank] = error

    threads = [threading.Thread(target=run, args=(rank,), daemon=True) for rank in range(size)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + HANG_S
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a rank hung"
    return results
