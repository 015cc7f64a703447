"""The gateway proxy's pure rules (services/gateway/http/proxy_rules.py): who
may reach a task's server, which headers pass each way, and which close codes."""

import pytest

from services.gateway.features.tasks.queries import ProxyTarget
from services.gateway.http import proxy_rules as rules

TASK_ID = "6f1c2a1e-0000-4000-8000-000000000001"


def target(**given: str) -> ProxyTarget:
    fields = {
        "task_id": TASK_ID,
        "task_type": "NOTEBOOK",
        "owner": "alice",
        "state": "RUNNING",
        "proxy_address": "127.0.0.1:8888",
        "exit_summary": "",
    }
    return ProxyTarget(**{**fields, **given})


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (
            {"state": "STARTING", "proxy_address": ""},
            "is not ready yet (it is STARTING); try again once it is RUNNING",
        ),
        ({"state": "PENDING", "proxy_address": ""}, "is not ready yet (it is PENDING)"),
        (
            {"state": "TERMINATED", "proxy_address": "", "exit_summary": "exited with code 1"},
            "has ended (TERMINATED): exited with code 1",
        ),
        ({"task_type": "COMMAND", "proxy_address": ""}, "runs no server to open (it is RUNNING)"),
    ],
)
def test_a_task_without_an_address_is_unreachable_saying_how_it_stands(
    given: dict[str, str], said: str
) -> None:
    refused = rules.not_ready(target(**given))
    assert isinstance(refused, rules.TaskUnreachableError)
    kind = given.get("task_type", "NOTEBOOK").lower()
    assert str(refused).startswith(f"{kind} {TASK_ID} {said}")


def test_a_task_that_does_not_answer_is_named_with_its_state_and_address() -> None:
    refused = rules.unreachable(target(), "connection refused")
    assert (
        str(refused) == f"notebook {TASK_ID} (RUNNING) did not answer at 127.0.0.1:8888: connection refused"
    )


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:8888", "127.0.0.1", 8888),
        ("agent-1.example:80", "agent-1.example", 80),
        ("[::1]:9000", "::1", 9000),
    ],
)
def test_addresses(text: str, host: str, port: int) -> None:
    assert rules.address(text) == (host, port)


@pytest.mark.parametrize("text", ["", "host", "host:", ":80", "host:0", "host:65536", "host:http"])
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a host:port address"):
        rules.address(text)


def test_the_users_credentials_and_hop_by_hop_headers_stay_with_the_gateway() -> None:
    sent = rules.request_headers(
        [
            (b"host", b"gateway:8081"),
            (b"authorization", b"Bearer session:1:s:2:sig"),
            (b"cookie", b"_xsrf=abc; det_session=session:1:s:2:sig; username-x=y"),
            (b"connection", b"keep-alive, x-private"),
            (b"x-private", b"for the next hop only"),
            (b"keep-alive", b"timeout=5"),
            (b"transfer-encoding", b"chunked"),
            (b"upgrade", b"websocket"),
            (b"sec-websocket-key", b"abc"),
            (b"x-forwarded-for", b"10.0.0.1"),
            (b"x-forwarded-proto", b"gopher"),
            (b"content-length", b"3"),
            (b"accept", b"text/html"),
        ],
        client="10.0.0.2",
        scheme="https",
        task_token="t0k",
    )
    assert sent == [
        (b"host", b"gateway:8081"),
        (b"cookie", b"_xsrf=abc; username-x=y"),
        (b"content-length", b"3"),
        (b"accept", b"text/html"),
        (b"authorization", b"token t0k"),
        (b"x-forwarded-for", b"10.0.0.1, 10.0.0.2"),
        (b"x-forwarded-proto", b"https"),
        (b"x-forwarded-host", b"gateway:8081"),
    ]


def test_a_cookie_header_of_the_session_cookie_alone_is_not_sent() -> None:
    sent = rules.request_headers([(b"cookie", b"det_session=abc")], client="", scheme="http", task_token="t")
    assert sent == [(b"authorization", b"token t"), (b"x-forwarded-proto", b"http")]


def test_a_task_may_not_set_the_gateways_session_cookie() -> None:
    passed = rules.response_headers(
        [
            (b"Content-Type", b"text/html"),
            (b"Set-Cookie", b"det_session=stolen; Path=/"),
            (b"set-cookie", b" DET_SESSION=other; Path=/"),
            (b"set-cookie", b"_xsrf=2|abc; Path=/proxy/x/"),
            (b"Connection", b"close, x-hop"),
            (b"x-hop", b"1"),
            (b"transfer-encoding", b"chunked"),
            (b"content-length", b"12"),
        ]
    )
    assert passed == [
        (b"content-type", b"text/html"),
        (b"set-cookie", b" DET_SESSION=other; Path=/"),  # another cookie: names are case-sensitive
        (b"set-cookie", b"_xsrf=2|abc; Path=/proxy/x/"),
        (b"content-length", b"12"),
    ]


def test_a_task_may_not_widen_its_service_workers_scope_or_clear_the_sites_data() -> None:
    passed = rules.response_headers(
        [
            (b"Service-Worker-Allowed", b"/"),
            (b"Clear-Site-Data", b'"cookies", "storage"'),
            (b"content-type", b"text/javascript"),
        ]
    )
    assert passed == [(b"content-type", b"text/javascript")]


@pytest.mark.parametrize(
    ("origin", "host", "cross"),
    [
        (None, "gateway:8081", False),
        ("http://gateway:8081", "gateway:8081", False),
        ("https://Gateway:8081", "gateway:8081", False),
        ("http://evil.example", "gateway:8081", True),
        ("http://gateway:9999", "gateway:8081", True),
        ("null", "gateway:8081", True),
        ("http://gateway:8081", None, True),
    ],
)
def test_a_cookie_request_from_another_origin_is_told_apart(
    origin: str | None, host: str | None, cross: bool
) -> None:
    assert rules.cross_origin(origin, host) is cross


@pytest.mark.parametrize(
    ("code", "sent"),
    [
        (1000, 1000),
        (1001, 1001),
        (4000, 4000),
        (3001, 3001),
        (None, 1011),
        (1005, 1011),
        (1006, 1011),
        (1015, 1011),
        (999, 1011),
        (5000, 1011),
    ],
)
def test_close_codes_pass_when_a_close_frame_may_carry_them(code: int | None, sent: int) -> None:
    assert rules.sendable_close_code(code, otherwise=1011) == sent
