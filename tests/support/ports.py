"""Free ports for servers that listen on a run of consecutive ports (the gateway's HTTP API and
tasks' pages on the master port + 1 and + 2; node i's local collectives on the pull port + i).

The run is taken below the kernel's ephemeral range (ip_local_port_range), where neither an
outgoing connection nor a server bound to port 0 (every other test server, and the ports agents
pick for tasks) is ever given a port: a port after a free ephemeral one may well be taken by the
time the cluster binds it, one down there only by another run picked at random."""

import random
import socket
from pathlib import Path

# Below Linux's default ephemeral range (32768-60999) and above the well-known and common ones.
LOWEST = 20000


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports on 127.0.0.1 that nothing holds now."""
    highest = _ephemeral_start() - count
    while True:
        first = random.randrange(LOWEST, highest)
        if _all_free(first, count):
            return first


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _all_free(first: int, count: int) -> bool:
    held: list[socket.socket] = []
    try:
        for port in range(first, first + count):
            held.append(socket.socket())
            held[-1].bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for sock in held:
            sock.close()
