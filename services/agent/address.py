"""The address an agent registers: where the other agents of a gang reach
its processes (DET_CHIEF_IP, DET_CONTAINER_ADDRS).

Unless DET_AGENT_ADDRESS says, it is the IP address of the interface this
host uses toward NATS: the network the other machines of the cluster share.
A cluster whose NATS is on this host's loopback is a local one: 127.0.0.1.
When no route can be found, the host name (which the others may resolve).
"""

import ipaddress
import socket
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"
DEFAULT_NATS_PORT = 4222


def advertised_address(nats_url: str) -> str:
    """This host's address as seen from NATS's network (see the module's docstring)."""
    first = nats_url.split(",")[0].strip()
    parts = urlsplit(first if "://" in first else f"nats://{first}")
    host = parts.hostname or ""
    if not host or host == "localhost" or _is_loopback(host):
        return LOOPBACK
    try:
        port = parts.port or DEFAULT_NATS_PORT
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # A UDP "connection" sends nothing: it only asks the kernel for the route.
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            address = str(probe.getsockname()[0])
    except (OSError, ValueError):
        return socket.gethostname()
    return LOOPBACK if _is_loopback(address) else address


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
