"""Free ports for servers that listen on a run of consecutive ports (the gateway's HTTP API on
the master port + 1; node i's local collectives on the pull port + i). Other test workers and
their clusters listen on free ports of their own: a port after a free one may well be taken."""

import socket


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports on 127.0.0.1 that nothing holds now."""
    while not (held := _bound_run(count)):
        pass
    first = int(held[0].getsockname()[1])
    for sock in held:
        sock.close()
    return first


def _bound_run(count: int) -> list[socket.socket]:
    """Sockets bound to `count` consecutive ports from a free one, or [] if one is taken."""
    held = [socket.socket()]
    held[0].bind(("127.0.0.1", 0))
    first = held[0].getsockname()[1]
    try:
        for port in range(first + 1, first + count):
            held.append(socket.socket())
            held[-1].bind(("127.0.0.1", port))
    except (OSError, OverflowError):  # taken, or past the last port
        for sock in held:
            sock.close()
        return []
    return held
