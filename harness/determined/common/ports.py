"""Ports of a distributed allocation, the same on every agent of its gang.

Every agent of a multi-agent allocation starts its own part without talking
to the others, yet the workers must meet on the same ports. So the ports are
a pure function of the allocation id: each agent computes them alone and gets
the same answer. They lie in 20000-39999, below the usual ephemeral range
(Linux starts it at 32768 but many hosts lower it; a clash is possible but
rare, and would fail the allocation loudly rather than silently).

The cluster's id goes into the hash too: every cluster numbers its
allocations from "1.1", so two clusters sharing a host (a test machine, a
second local cluster) would otherwise put their first distributed trials on
the same ports, and the second torchrun's bind would fail.
"""

import zlib

PORT_BASE = 20000
PORT_SPAN = 20000


def allocation_ports(allocation_id: str, cluster_id: str = "") -> tuple[int, int, int]:
    """Return (c10d port, comm port 1, comm port 2) for an allocation: three
    distinct ports in [PORT_BASE, PORT_BASE + PORT_SPAN), deterministic in
    the cluster's id and the allocation id."""
    key = f"{cluster_id}/{allocation_id}" if cluster_id else allocation_id
    offset = zlib.crc32(key.encode("utf-8")) % (PORT_SPAN - 2)
    first = PORT_BASE + offset
    return first, first + 1, first + 2
