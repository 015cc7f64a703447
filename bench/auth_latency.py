"""What authentication adds to a call. Starts its own nats-server and
PostgreSQL and a gateway in-process (a real cluster's settings: no anonymous
calls), logs in, then measures:

- the token check alone (the interceptor's `Authenticator.authenticate`), for
  a user's session token and for a trial's allocation token: the time every
  authenticated call pays, read from memory, with no password hash;
- the round trip of GetMe (answered from memory) with a session token, and
  without one on a second gateway that allows anonymous calls (as every
  call was before users: no token to check), interleaved: the difference of
  the medians is the latency a session token adds to a call, seen from the
  client;
- Login (bcrypt of the salted password: paid once per login, never per call).

Prints figures; asserts nothing.

    python bench/auth_latency.py [--calls 5000] [--checks 100000] [--logins 20]
"""

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable

import grpc
from _servers import SECRET, gateway_settings, run_with_servers

from deploy.local.servers import free_port
from determined.common.passwords import salted_hash
from determined.proto import api_pb2, api_pb2_grpc
from services.common.tokens import mint_allocation_token
from services.gateway.auth import Authenticator
from services.gateway.server import Gateway

PASSWORD = "bench-password"


def micros(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"median {statistics.median(ordered) * 1e6:,.1f} µs, p99 {p99 * 1e6:,.1f} µs"


async def timed(call: Callable[[], Awaitable[object]], count: int) -> list[float]:
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


async def bench(args: argparse.Namespace, nats_url: str, postgres_url: str) -> None:
    settings = await gateway_settings(nats_url, postgres_url, initial_user_password=PASSWORD)
    gateway = await Gateway.start(settings)
    anonymous = await Gateway.start(
        settings.model_copy(update={"gateway_port": free_port(), "allow_anonymous": True})
    )
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{anonymous.port}") as anonymous_channel,
        ):
            api = api_pb2_grpc.DeterminedStub(channel)
            anonymous_api = api_pb2_grpc.DeterminedStub(anonymous_channel)
            login = api_pb2.LoginRequest(
                username="determined", password=salted_hash(PASSWORD), is_hashed=True
            )
            logins = await timed(lambda: api.Login(login), args.logins)
            token = (await api.Login(login)).token
            metadata = (("authorization", f"Bearer {token}"),)
            authenticator = Authenticator(SECRET, gateway.user_directory)
            session = await timed(lambda: authenticator.authenticate(dict(metadata)), args.checks)
            allocation = {"x-allocation-token": mint_allocation_token(SECRET, 1, "1.1")}
            trial = await timed(lambda: authenticator.authenticate(allocation), args.checks)

            def with_token() -> Awaitable[object]:
                return api.GetMe(api_pb2.GetMeRequest(), metadata=metadata)  # type: ignore[no-any-return]

            def without_token() -> Awaitable[object]:
                return anonymous_api.GetMe(api_pb2.GetMeRequest())  # type: ignore[no-any-return]

            await timed(with_token, args.calls // 10)  # warm up both
            await timed(without_token, args.calls // 10)
            me, plain = [], []
            for _ in range(10):  # interleaved, so that drift hits both alike
                me += await timed(with_token, args.calls // 10)
                plain += await timed(without_token, args.calls // 10)
    finally:
        await anonymous.stop()
        await gateway.stop()
    print(f"token check, session token (user call): {micros(session)} over {len(session):,} checks")
    print(f"token check, allocation token (trial report): {micros(trial)} over {len(trial):,} checks")
    print(f"GetMe round trip, with a session token: {micros(me)} over {len(me):,} calls")
    print(f"GetMe round trip, anonymous (no token to check): {micros(plain)} over {len(plain):,} calls")
    added = statistics.median(me) - statistics.median(plain)
    print(f"added latency per authenticated call (difference of the medians): {added * 1e6:,.1f} µs")
    print(f"Login (bcrypt cost 10): {micros(logins)} over {len(logins)} logins")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--checks", type=int, default=100_000)
    parser.add_argument("--logins", type=int, default=20)
    args = parser.parse_args()
    run_with_servers(bench, args)


if __name__ == "__main__":
    main()
