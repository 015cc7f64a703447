"""The address an agent registers (services/agent/address.py)."""

import socket

import pytest

from services.agent.address import LOOPBACK, advertised_address


@pytest.mark.parametrize(
    "url",
    [
        "nats://127.0.0.1:4222",
        "nats://localhost:4222",
        "nats://[::1]:4222",
        "127.0.0.1:4222",
        "nats://127.0.0.1:4222,nats://10.1.2.3:4222",
        "",
    ],
)
def test_a_cluster_on_the_loopback_is_a_local_one(url: str) -> None:
    assert advertised_address(url) == LOOPBACK


def test_toward_another_host_the_address_of_the_route_else_the_host_name() -> None:
    # 192.0.2.0/24 is reserved for documentation: a route may exist (the
    # default one) or not; either way nothing is sent.
    address = advertised_address("nats://192.0.2.1:4222")
    assert address == socket.gethostname() or (address.count(".") == 3 and address != "192.0.2.1")


def test_a_host_that_does_not_resolve_gives_the_host_name() -> None:
    assert advertised_address("nats://no-such-host.invalid:4222") == socket.gethostname()
