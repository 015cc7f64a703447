"""nats-server and PostgreSQL for a benchmark that runs its own gateway in-process: free ports,
one folder under /tmp (not mkdtemp's 0700 one: as root, PostgreSQL runs as its own user and must
reach it), everything stopped and removed afterwards."""

import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.local.servers import NatsServer, PostgresServer, free_port


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
