"""Shared bits of the recovery benchmarks (bench/rebuild.py, bench/startup.py):
a nats-server and a PostgreSQL kept in one folder between runs, and the
generated log (bench/gen_log.py) appended once to its own namespace there, so
that a second run measures without generating again."""

import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
from gen_log import append_log, describe

from deploy.local.servers import NatsServer, PostgresServer, free_port
from services.common.eventstore import EventStore
from services.gateway.features.parts import Parts, Queries
from services.gateway.features.users.directory import UserDirectory
from services.gateway.projector import Projector
from services.gateway.settings import GatewaySettings

DEFAULT_DATA_DIR = Path("/tmp/det-bench-recovery")


@dataclass(frozen=True)
class Servers:
    nats_url: str
    postgres_url: str

    def database_url(self, database: str) -> str:
        return self.postgres_url.rsplit("/", 1)[0] + f"/{database}"


class _BenchNatsServer(NatsServer):
    """The cluster's nats-server without a disk sync per write: a benchmark
    appends its log once, then only reads it."""

    def config_text(self) -> str:
        return super().config_text().replace("sync_interval: always", "sync_interval: 2m")


@contextmanager
def servers(data_dir: Path, fresh: bool = False) -> Iterator[Servers]:
    """nats-server and PostgreSQL on free ports, their data in `data_dir`
    (kept afterwards unless `fresh` removed it first)."""
    # SIGTERM (timeout, kill) stops the servers too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if fresh and data_dir.exists():
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    nats = _BenchNatsServer(data_dir / "nats", free_port(), data_dir / "nats.log")
    postgres = PostgresServer(data_dir / "pg", free_port(), data_dir / "postgres.log")
    nats_process = nats.start()
    try:
        postgres.start()
        try:
            yield Servers(nats.url, postgres.url)
        finally:
            postgres.stop()
    finally:
        nats_process.terminate()
        nats_process.wait(30)


def namespace_of(events: int, seed: int) -> str:
    return f"recovery_{events}_{seed}"


async def ensure_log(nats_url: str, events: int, seed: int) -> tuple[str, int]:
    """The namespace holding the generated log of `events` events (appended
    now if it is not there yet) and its last sequence."""
    namespace = namespace_of(events, seed)
    store = await EventStore.connect(nats_url, namespace, name="bench-recovery")
    try:
        last = await store.last_sequence()
        if 0 < last < events:
            raise SystemExit(
                f"the log in namespace {namespace} is incomplete ({last:,} events): run with --fresh"
            )
        if last == 0:
            print(
                f"# generating a {events:,}-event log into namespace {namespace}", file=sys.stderr, flush=True
            )
            print(describe(await append_log(nats_url, namespace, events, seed)), file=sys.stderr, flush=True)
            last = await store.last_sequence()
    finally:
        await store.close()
    return namespace, last


async def ensure_database(postgres_url: str, database: str) -> None:
    connection = await asyncpg.connect(postgres_url)
    try:
        if not await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database):
            await connection.execute(f'CREATE DATABASE "{database}"')
    finally:
        await connection.close()


@asynccontextmanager
async def live_parts(running: Servers, events: int, seed: int, name: str) -> AsyncIterator[Parts]:
    """What the gateway's feature functions stand on (features/parts.py), over
    the generated log and read models brought up to its end (a full replay
    the first time), as a gateway of that cluster would have them."""
    namespace, _ = await ensure_log(running.nats_url, events, seed)
    await ensure_database(running.postgres_url, namespace)
    database_url = running.database_url(namespace)
    store = await EventStore.connect(running.nats_url, namespace, name=name)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4)
    try:
        projector = Projector(store, pool)
        started = time.perf_counter()
        await projector.run(follow=False)
        print(f"read models at sequence {projector.position:,} ({time.perf_counter() - started:.1f} s)")
        settings = GatewaySettings(nats_url=running.nats_url, namespace=namespace, database_url=database_url)
        yield Parts(settings, store, projector, Queries(pool), UserDirectory(store))
    finally:
        await pool.close()
        await store.close()
