"""Fixtures of the harness's unit tests: an in-process fake gateway (a real
gRPC server, see core_gateway.py) that trial code talks to."""

from collections.abc import Iterator

import pytest
from core_gateway import FakeGateway, Server


@pytest.fixture
def gateway() -> Iterator[Server]:
    server = Server(FakeGateway())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fake(gateway: Server) -> FakeGateway:
    return gateway.gateway
