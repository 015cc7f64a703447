"""Finding 7 of issue 17: repeated failed logins are slowed down, per user and
per client address (login_limits.py), and logged without the password; the
right password works once the wait is over. Against a real gateway (gRPC and
HTTP login), nats-server and PostgreSQL, on a clock the test moves."""

import re

import grpc
import httpx
import structlog
from support import security_gateway
from support.security_gateway import PASSWORD, refused

from determined.proto import api_pb2, api_pb2_grpc
from services.gateway.features.users.login_limits import FREE_FAILURES, MAX_DELAY_S
from services.gateway.server import Gateway

# The module's fixtures: a real gateway and clients of it (tests/support/security_gateway.py).
gateway = security_gateway.gateway

GUESSES = 30
WRONG = "guess-{}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def stopped_clock(gateway: Gateway) -> Clock:
    """The gateway's login throttle on a clock that moves only when the test moves it."""
    clock = Clock()
    gateway.api.users.login_throttle.clock = clock
    return clock


def wait_s(message: str) -> int:
    found = re.search(r"wait (\d+) s before trying again", message)
    assert found is not None, message
    return int(found.group(1))


async def test_grpc_login_guesses_are_slowed_and_the_right_password_works_after_the_wait(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway
) -> None:
    clock = stopped_clock(gateway)
    with structlog.testing.capture_logs() as logs:
        errors = [
            await refused(api.Login(api_pb2.LoginRequest(username="admin", password=WRONG.format(n))))
            for n in range(GUESSES)
        ]
    codes = [error.code() for error in errors]
    assert codes == [grpc.StatusCode.UNAUTHENTICATED] * FREE_FAILURES + [
        grpc.StatusCode.RESOURCE_EXHAUSTED
    ] * (GUESSES - FREE_FAILURES)
    assert errors[-1].details() == "too many failed logins for user admin: wait 1 s before trying again"
    failed = [entry for entry in logs if entry["event"] == "login_failed"]
    assert [(e["username"], e["address"]) for e in failed] == [("admin", "127.0.0.1")] * FREE_FAILURES
    assert not any(WRONG.format(n) in repr(entry) for entry in logs for n in range(GUESSES))

    right = api_pb2.LoginRequest(username="admin", password=PASSWORD)
    early = await refused(api.Login(right))
    assert early.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # not even the right password before the wait
    clock.now += wait_s(early.details() or "")
    assert (await api.Login(right)).user.username == "admin"


async def test_http_login_guesses_are_slowed_too(gateway: Gateway, http: httpx.AsyncClient) -> None:
    clock = stopped_clock(gateway)
    answers = [
        await http.post("/api/v1/auth/login", json={"username": "admin", "password": WRONG.format(n)})
        for n in range(GUESSES)
    ]
    assert [a.status_code for a in answers] == [401] * FREE_FAILURES + [429] * (GUESSES - FREE_FAILURES)
    message = answers[-1].json()["message"]
    assert message == "too many failed logins for user admin: wait 1 s before trying again"
    clock.now += wait_s(message)
    answer = await http.post("/api/v1/auth/login", json={"username": "admin", "password": PASSWORD})
    assert answer.status_code == 200 and answer.json()["user"]["username"] == "admin"


async def test_a_wait_is_capped_so_nobody_locks_a_user_out(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway
) -> None:
    clock = stopped_clock(gateway)
    for n in range(GUESSES):  # an attacker who waits out every delay: 30 real guesses
        guess = api_pb2.LoginRequest(username="admin", password=WRONG.format(n))
        while (error := await refused(api.Login(guess))).code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
            clock.now += wait_s(error.details() or "")
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    error = await refused(api.Login(api_pb2.LoginRequest(username="admin", password=PASSWORD)))
    assert wait_s(error.details() or "") == MAX_DELAY_S
    clock.now += wait_s(error.details() or "")
    assert (await api.Login(api_pb2.LoginRequest(username="admin", password=PASSWORD))).token


async def test_a_forwarded_for_header_does_not_choose_the_address_counted(
    gateway: Gateway, http: httpx.AsyncClient
) -> None:
    """Guesses at many usernames, each claiming another client address: the
    address counted is the connection's, so they are slowed as one sender's."""
    stopped_clock(gateway)
    with structlog.testing.capture_logs() as logs:
        answers = [
            await http.post(
                "/api/v1/auth/login",
                json={"username": f"user-{n}", "password": WRONG.format(n)},
                headers={"X-Forwarded-For": f"10.0.0.{n + 1}"},
            )
            for n in range(GUESSES)
        ]
    assert [a.status_code for a in answers] == [401] * FREE_FAILURES + [429] * (GUESSES - FREE_FAILURES)
    failed = [entry for entry in logs if entry["event"] == "login_failed"]
    assert {entry["address"] for entry in failed} == {"127.0.0.1"}
