"""A PostgreSQL of the tests' own, in a folder under /tmp (PostgreSQL runs as its own
user when the tests run as root, and must reach the folder), removed afterwards."""

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.local.servers import PostgresServer, free_port


@contextmanager
def running_postgres(prefix: str) -> Iterator[PostgresServer]:
    folder = Path("/tmp") / f"{prefix}-{uuid.uuid4().hex[:8]}"
    server = PostgresServer(folder / "data", free_port(), folder / "postgres.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
