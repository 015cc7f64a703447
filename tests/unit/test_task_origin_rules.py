"""The port of tasks' pages: the gateway's settings refuse what cannot work, and the
addresses a redirect names are the client's host on the other port."""

from typing import Any

import pytest
from pydantic import ValidationError

from deploy.local.cluster import ClusterOptions, proxy_port, service_environment
from services.gateway.http.task_origin import has_bearer_token, origin, path_and_query
from services.gateway.settings import GatewaySettings


def settings(**fields: Any) -> GatewaySettings:
    return GatewaySettings(database_url="postgresql://gateway@localhost/determined", **fields)


def test_tasks_pages_have_a_port_of_their_own_beside_the_http_api() -> None:
    assert settings(http_port=8081, proxy_port=8082).proxy_port == 8082
    assert settings(http_port=0, proxy_port=0).proxy_port == 0  # two free ports
    with pytest.raises(ValidationError, match="DET_PROXY_PORT needs DET_HTTP_PORT"):
        settings(proxy_port=8082)
    with pytest.raises(ValidationError, match="both 8081: tasks' pages need a port of their own"):
        settings(http_port=8081, proxy_port=8081)


def test_a_local_cluster_serves_tasks_pages_on_the_master_port_plus_two(tmp_path: Any) -> None:
    assert proxy_port(8080, {}) == 8082
    assert proxy_port(8080, {"DET_PROXY_PORT": "9000"}) == 9000
    environment = service_environment(ClusterOptions(tmp_path, master_port=8123), tmp_path, "nats://x")
    assert (environment["DET_HTTP_PORT"], environment["DET_PROXY_PORT"]) == ("8124", "8125")


def scope(host: str | None, *, scheme: str = "http", authorization: str = "") -> dict[str, Any]:
    headers = [] if host is None else [(b"host", host.encode())]
    if authorization:
        headers.append((b"authorization", authorization.encode()))
    return {
        "type": "http",
        "scheme": scheme,
        "server": ("10.0.0.5", 8081),
        "headers": headers,
        "path": "/proxy/t/a b",
        "raw_path": b"/proxy/t/a%20b",
        "query_string": b"x=1",
    }


@pytest.mark.parametrize(
    ("host", "scheme", "expected"),
    [
        ("gateway.example:8081", "http", "http://gateway.example:8082"),
        ("gateway.example", "https", "https://gateway.example:8082"),
        ("[::1]:8081", "ws", "http://[::1]:8082"),
        ("127.0.0.1:8081", "wss", "https://127.0.0.1:8082"),
        (None, "http", "http://10.0.0.5:8082"),  # no Host: the address the connection came to
        ("evil.example/x?y", "http", "http://10.0.0.5:8082"),  # no host name at all
    ],
)
def test_an_origin_is_the_clients_host_on_the_other_port(
    host: str | None, scheme: str, expected: str
) -> None:
    assert origin(scope(host, scheme=scheme), 8082) == expected


def test_the_path_is_passed_on_as_the_client_encoded_it() -> None:
    assert path_and_query(scope("h")) == "/proxy/t/a%20b?x=1"


def test_only_a_bearer_token_keeps_a_request_on_the_web_uis_port() -> None:
    assert has_bearer_token(scope("h", authorization="Bearer abc"))
    assert not has_bearer_token(scope("h", authorization="Basic YTpi"))
    assert not has_bearer_token(scope("h"))
