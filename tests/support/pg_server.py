"""A PostgreSQL of the tests' own, in a folder under /tmp (PostgreSQL runs as its own
user when the tests run as root, and must reach the folder), removed afterwards; not durable
(fsync=off: nobody keeps its data)."""

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from deploy.local.servers import PostgresServer, free_port


@contextmanager
def running_postgres(prefix: str) -> Iterator[PostgresServer]:
    folder = Path("/tmp") / f"{prefix}-{uuid.uuid4().hex[:8]}"
    server = PostgresServer(folder / "data", free_port(), folder / "postgres.log", durable=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def new_database(server: PostgresServer, name: str) -> str:
    """A fresh, empty database named `name` on `server` (asyncpg-style URL): one test's
    (conftest's database_url), or a module's, from a module-scoped fixture."""
    connection = await asyncpg.connect(server.url)
    try:
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    return server.url.rsplit("/", 1)[0] + f"/{name}"
