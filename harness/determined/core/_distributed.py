"""`core_context.distributed`: who this process is among the trial's workers.

Single-process trials work fully; collectives across several processes arrive with
distributed training, until then they raise NotImplementedError when size > 1.
"""

import os
from typing import Any, TypeVar

T = TypeVar("T")

_NO_COLLECTIVES = "multi-process collectives arrive with distributed training"


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
        pub_port: int = 12360,
        pull_port: int = 12376,
        port_offset: int = 0,
        force_tcp: bool = False,
    ) -> None:
        _check_rank("rank", rank, "size", size)
        _check_rank("local_rank", local_rank, "local_size", local_size)
        _check_rank("cross_rank", cross_rank, "cross_size", cross_size)
        if chief_ip is None and local_size != size:
            raise ValueError("chief_ip is required when the workers span several nodes (local_size != size)")
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

    @classmethod
    def from_torch_distributed(cls, chief_ip: str | None = None) -> "DistributedContext":
        """Build from the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""
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
        self._single("size")
        return [stuff]

    def gather(self, stuff: T) -> list[T] | None:
        self._single("size")
        return [stuff]

    def broadcast(self, stuff: T) -> T:
        self._single("size")
        return stuff

    def allgather_local(self, stuff: T) -> list[T]:
        self._single("local_size")
        return [stuff]

    def gather_local(self, stuff: T) -> list[T] | None:
        self._single("local_size")
        return [stuff]

    def broadcast_local(self, stuff: T) -> T:
        self._single("local_size")
        return stuff

    def close(self) -> None:
        """Nothing to release while collectives are single-process."""

    def _single(self, size_attribute: str) -> None:
        if getattr(self, size_attribute) > 1:
            raise NotImplementedError(_NO_COLLECTIVES)


class DummyDistributedContext(DistributedContext):
    """A single process: rank 0 of 1."""

    def __init__(self) -> None:
        super().__init__(rank=0, size=1, local_rank=0, local_size=1, cross_rank=0, cross_size=1)


def _check_rank(rank_name: str, rank: Any, size_name: str, size: Any) -> None:
    for name, value in ((rank_name, rank), (size_name, size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= {rank_name} < {size_name}, got {rank_name}={rank}, {size_name}={size}")
