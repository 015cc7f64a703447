"""`core_context.distributed`: who this process is among the trial's workers, and the
collectives between them.

Collectives carry pickled Python objects over plain sockets, in stars: the chief (rank 0)
listens on chief_ip:pub_port and every other worker connects to it; each node's local chief
(local rank 0) listens the same way for the workers of its node, which the *_local calls
use: on a unix socket named after the ports and the node (`force_tcp`: TCP on loopback,
port pull_port + cross_rank, so that two containers on one host do not clash). Every worker
must call the same collectives in the same order (as in Determined), so one connection per
worker, read in rank order, is all the bookkeeping a collective needs: a gather is the hub
reading one message from each spoke, a broadcast the hub writing one to each.

Connections open at the first collective (a context nobody gathers with needs no peer).
A connecting worker first sends a JSON hello naming its star, position and size and a
digest of the allocation's session token; the hub unpickles nothing from a connection whose
hello does not match, since unpickling runs code.
"""

import contextlib
import hashlib
import hmac
import json
import os
import pickle
import socket
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

T = TypeVar("T")

DEFAULT_PUB_PORT = 12360
# As in Determined: the second port defaults to the first + 16.
PULL_PORT_OFFSET = 16
# How long workers wait for their hub to listen, and a hub for every worker to connect:
# the workers of a gang start within seconds of each other, but a slow node may lag.
CONNECT_TIMEOUT_S = 300.0

_HEADER = struct.Struct(">Q")
_MAX_HELLO_BYTES = 4096
_RETRY_FIRST_S = 0.02
_RETRY_MAX_S = 1.0

_Address = tuple[str, int] | str  # (host, port) for TCP, a path for a unix socket


class CollectiveError(ConnectionError):
    """A peer of a collective is gone or is not who it should be."""


class DistributedContext:
    def __init__(
        self,
        *,
        rank: int,
        size: int,
        local_rank: int,
        local_size: int,
        cross_rank: int,
        cross_size: int,
        chief_ip: str | None = None,
        pub_port: int | None = None,
        pull_port: int | None = None,
        port_offset: int = 0,
        force_tcp: bool = False,
    ) -> None:
        """Ports left out come from INTER_TRAIN_PROCESS_COMM_PORT_1 / _2 (which the agent sets
        per allocation), else 12360 and the first port + 16."""
        _check_rank("rank", rank, "size", size)
        _check_rank("local_rank", local_rank, "local_size", local_size)
        _check_rank("cross_rank", cross_rank, "cross_size", cross_size)
        if chief_ip is None and local_size != size:
            raise ValueError("chief_ip is required when the workers span several nodes (local_size != size)")
        if pub_port is None:
            pub_port = int(os.environ.get("INTER_TRAIN_PROCESS_COMM_PORT_1") or DEFAULT_PUB_PORT)
        if pull_port is None:
            pull_port = int(os.environ.get("INTER_TRAIN_PROCESS_COMM_PORT_2") or pub_port + PULL_PORT_OFFSET)
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.cross_rank = cross_rank
        self.cross_size = cross_size
        self.chief_ip = chief_ip or "127.0.0.1"
        self.pub_port = pub_port + port_offset
        self.pull_port = pull_port + port_offset
        self.force_tcp = force_tcp
        self._closed = False
        token = os.environ.get("DET_SESSION_TOKEN", "")
        # The chief listens on all interfaces when the workers span several nodes: its
        # address as the others reach it need not be one of its own (NAT, a hostname).
        bind_host = self.chief_ip if local_size == size else ""
        self._global = _Star(
            "global", (self.chief_ip, self.pub_port), bind_host, rank, size, token, lambda: self._closed
        )
        self._local = _Star(
            f"local-{cross_rank}", self._local_address(), "127.0.0.1", local_rank, local_size, token,
            lambda: self._closed,
        )  # fmt: skip

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> "DistributedContext":
        """Build from the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...); the
        chief's address defaults to DET_CHIEF_IP, which the launcher sets."""
        env = os.environ
        return cls(
            rank=int(env["RANK"]),
            size=int(env["WORLD_SIZE"]),
            local_rank=int(env["LOCAL_RANK"]),
            local_size=int(env["LOCAL_WORLD_SIZE"]),
            cross_rank=int(env["GROUP_RANK"]),
            cross_size=int(env["GROUP_WORLD_SIZE"]),
            chief_ip=chief_ip or env.get("DET_CHIEF_IP"),
        )

    def get_rank(self) -> int:
        return self.rank

    def get_local_rank(self) -> int:
        return self.local_rank

    def get_size(self) -> int:
        return self.size

    def get_local_size(self) -> int:
        return self.local_size

    def get_cross_rank(self) -> int:
        return self.cross_rank

    def get_cross_size(self) -> int:
        return self.cross_size

    def get_num_agents(self) -> int:
        return self.cross_size

    def allgather(self, stuff: T) -> list[T]:
        """Every rank's `stuff`, in rank order, on every rank."""
        return cast(list[T], self._global.broadcast(self._global.gather(stuff)))

    def gather(self, stuff: T) -> list[T] | None:
        """Every rank's `stuff` in rank order on the chief; None on the other ranks."""
        return cast(list[T] | None, self._global.gather(stuff))

    def broadcast(self, stuff: T) -> T:
        """The chief's `stuff` on every rank (what the others pass is ignored)."""
        return cast(T, self._global.broadcast(stuff))

    def allgather_local(self, stuff: T) -> list[T]:
        """Every local rank's `stuff` of this node, in local rank order."""
        return cast(list[T], self._local.broadcast(self._local.gather(stuff)))

    def gather_local(self, stuff: T) -> list[T] | None:
        return cast(list[T] | None, self._local.gather(stuff))

    def broadcast_local(self, stuff: T) -> T:
        return cast(T, self._local.broadcast(stuff))

    def close(self) -> None:
        """Close the connections; collectives after this raise RuntimeError. Safe to call twice."""
        self._closed = True
        self._global.close()
        self._local.close()

    def _local_address(self) -> _Address:
        if self.force_tcp:
            return ("127.0.0.1", self.pull_port + self.cross_rank)
        name = f"det-collectives-{self.pub_port}-{self.pull_port}-{self.cross_rank}.sock"
        return os.path.join(tempfile.gettempdir(), name)


class DummyDistributedContext(DistributedContext):
    """A single process: rank 0 of 1."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)


class _Star:
    """A hub (position 0) and its spokes, one connection per spoke."""

    def __init__(
        self,
        name: str,
        address: _Address,
        bind_host: str,
        position: int,
        count: int,
        token: str,
        closed: Callable[[], bool],
    ) -> None:
        self._name = name
        self._address = address
        self._bind_host = bind_host
        self._position = position
        self._count = count
        self._digest = hashlib.sha256(f"det-collectives:{token}".encode()).hexdigest()
        self._closed = closed
        self._listener: socket.socket | None = None
        self._spokes: list[socket.socket] = []  # the hub's, in position order
        self._hub: socket.socket | None = None  # a spoke's

    def gather(self, value: Any) -> list[Any] | None:
        if self._count == 1:
            return [value]
        if self._position != 0:
            data = pickle.dumps(value)
            try:
                _send(self._connected_hub(), data)
            except OSError as error:
                raise CollectiveError(f"the chief of the {self._name} collectives is gone: {error}") from None
            return None
        return [value] + [
            pickle.loads(self._receive(spoke, i + 1)) for i, spoke in enumerate(self._connected())
        ]

    def broadcast(self, value: Any) -> Any:
        if self._count == 1:
            return value
        if self._position != 0:
            return pickle.loads(self._receive(self._connected_hub(), 0))
        data = pickle.dumps(value)
        for i, spoke in enumerate(self._connected()):
            try:
                _send(spoke, data)
            except OSError as error:
                raise CollectiveError(
                    f"rank {i + 1} of the {self._name} collectives is gone: {error}"
                ) from None
        return value

    def close(self) -> None:
        for sock in [*self._spokes, *([self._hub] if self._hub else [])]:
            sock.close()
        self._spokes, self._hub = [], None
        self._stop_listening()

    def _stop_listening(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            if isinstance(self._address, str):
                _unlink(self._address)

    def _receive(self, sock: socket.socket, position: int) -> bytes:
        try:
            return _receive(sock)
        except (OSError, EOFError) as error:
            who = "the chief" if position == 0 else f"rank {position}"
            raise CollectiveError(
                f"{who} of the {self._name} collectives is gone ({error}); did it exit or skip a collective?"
            ) from None

    def _check_open(self) -> None:
        if self._closed():
            raise RuntimeError("the DistributedContext is closed")

    def _connected_hub(self) -> socket.socket:
        self._check_open()
        if self._hub is None:
            self._hub = self._connect()
        return self._hub

    def _connected(self) -> list[socket.socket]:
        self._check_open()
        if not self._spokes:
            try:
                self._spokes = self._accept_all()
            finally:
                self._stop_listening()  # every spoke is in: nobody else may connect
        return self._spokes

    def _connect(self) -> socket.socket:
        """Connect to the hub, retrying while it does not listen yet; send the hello."""
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        delay = _RETRY_FIRST_S
        while True:
            try:
                sock = _dial(self._address, max(0.1, min(5.0, deadline - time.monotonic())))
                break
            except OSError as error:
                if time.monotonic() + delay > deadline:
                    raise CollectiveError(
                        f"could not reach the chief of the {self._name} collectives at {_describe(self._address)} "
                        f"within {CONNECT_TIMEOUT_S:.0f} s: {error}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
        sock.settimeout(None)
        hello = {"star": self._name, "position": self._position, "count": self._count, "token": self._digest}
        _send(sock, json.dumps(hello).encode())
        return sock

    def _accept_all(self) -> list[socket.socket]:
        """Listen and take every spoke's connection, checked by its hello."""
        self._listener = listener = _listen(self._address, self._bind_host, self._count)
        deadline = time.monotonic() + CONNECT_TIMEOUT_S
        spokes: dict[int, socket.socket] = {}
        while len(spokes) < self._count - 1:
            listener.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                missing = sorted(set(range(1, self._count)) - set(spokes))
                for sock in spokes.values():
                    sock.close()
                raise CollectiveError(
                    f"ranks {missing} of the {self._name} collectives did not connect within "
                    f"{CONNECT_TIMEOUT_S:.0f} s"
                ) from None
            position = self._greet(sock, deadline)
            if position is None or position in spokes:
                sock.close()
                continue
            spokes[position] = sock
        return [spokes[position] for position in range(1, self._count)]

    def _greet(self, sock: socket.socket, deadline: float) -> int | None:
        """The position a new connection's hello claims, or None if it is not a spoke of this
        star (a stray client, another allocation's worker, a wrong size)."""
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            hello = json.loads(_receive(sock, limit=_MAX_HELLO_BYTES))
            position = hello["position"]
            valid = (
                hmac.compare_digest(str(hello["token"]), self._digest)
                and hello["star"] == self._name
                and hello["count"] == self._count
                and isinstance(position, int)
                and 0 < position < self._count
            )
        except (OSError, EOFError, ValueError, KeyError, TypeError):
            return None
        sock.settimeout(None)
        return position if valid else None


def _dial(address: _Address, timeout_s: float) -> socket.socket:
    if isinstance(address, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        return sock
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _listen(address: _Address, bind_host: str, count: int) -> socket.socket:
    if isinstance(address, str):
        _unlink(address)  # left by a crashed run of the same allocation
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(address)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind_host, address[1]))
    sock.listen(count)
    return sock


def _send(sock: socket.socket, data: bytes) -> None:
    sock.sendall(_HEADER.pack(len(data)) + data)


def _receive(sock: socket.socket, limit: int | None = None) -> bytes:
    (length,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    if limit is not None and length > limit:
        raise ValueError(f"message of {length} bytes over the limit of {limit}")
    return _receive_exactly(sock, length)


def _receive_exactly(sock: socket.socket, length: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < length:
        chunk = sock.recv(min(length - len(chunks), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        chunks += chunk
    return bytes(chunks)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _describe(address: _Address) -> str:
    return address if isinstance(address, str) else f"{address[0]}:{address[1]}"


def _check_rank(rank_name: str, rank: Any, size_name: str, size: Any) -> None:
    for name, value in ((rank_name, rank), (size_name, size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= {rank_name} < {size_name}, got {rank_name}={rank}, {size_name}={size}")
