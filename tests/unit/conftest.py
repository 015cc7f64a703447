"""Fixtures of the harness's unit tests: an in-process fake gateway (a real
gRPC server, see tests/support/core_gateway.py) that trial code talks to."""

from collections.abc import Iterator

import pytest
from support.core_gateway import FakeGateway, Server


@pytest.fixture
def gateway() -> Iterator[Server]:
    server = Server(FakeGateway())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake(gateway: Server) -> FakeGateway:
    return gateway.gateway


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one thread for the test (the PyTorch API tests compare losses exactly)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
