"""nats-server and PostgreSQL for a benchmark that runs its own gateway in-process: free ports,
one folder under /tmp (not mkdtemp's 0700 one: as root, PostgreSQL runs as its own user and must
reach it), everything stopped and removed afterwards; and the settings of such a gateway."""

import argparse
import asyncio
import shutil
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

from deploy.local.servers import NatsServer, PostgresServer, free_port
from services.common.logging import configure_logging
from services.gateway.settings import GatewaySettings

T = TypeVar("T")
# Signs the benchmark gateway's session and allocation tokens.
SECRET = "bench-secret"


@contextmanager
def temporary_servers() -> Iterator[tuple[str, str]]:
    """(nats_url, postgres_url) of servers that live as long as the block."""
    folder = Path("/tmp") / f"det-bench-{uuid.uuid4().hex[:8]}"
    nats = NatsServer(folder / "nats", free_port(), folder / "nats.log")
    postgres = PostgresServer(folder / "pg", free_port(), folder / "postgres.log")
    nats_process = nats.start()
    try:
        postgres.start()
        try:
            yield nats.url, postgres.url
        finally:
            postgres.stop()
    finally:
        nats_process.terminate()
        nats_process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def run_with_servers(
    bench: Callable[[argparse.Namespace, str, str], Coroutine[Any, Any, T]], args: argparse.Namespace
) -> T:
    """Runs `bench(args, nats_url, postgres_url)` on temporary servers, logging warnings only."""
    configure_logging("bench", json=False, log_file=None, level="WARNING")
    with temporary_servers() as (nats_url, postgres_url):
        return asyncio.run(bench(args, nats_url, postgres_url))


async def gateway_settings(nats_url: str, postgres_url: str, **settings: Any) -> GatewaySettings:
    """A loopback gateway's settings on a database of its own (created here) and a namespace of
    the same name; `settings` adds to them (an initial password, an HTTP port, ...)."""
    database = f"bench_{uuid.uuid4().hex[:8]}"
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f'CREATE DATABASE "{database}"')
    finally:
        await connection.close()
    return GatewaySettings(
        nats_url=nats_url,
        namespace=database,
        database_url=postgres_url.rsplit("/", 1)[0] + f"/{database}",
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        grace_period_s=0.1,
        **settings,
    )
