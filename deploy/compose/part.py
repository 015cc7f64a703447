"""The entry point of the cluster image: runs one part of a compose cluster in its container.

    python3 -m deploy.compose.part PART     run PART (nats-server, postgres, gateway,
                                            scheduler, searcher, checkpoint, agent, keeper)

The part's settings and credentials come from the file the compose file mounts read-only
at PART_FILE (made by cluster-up --docker, deploy/compose/cluster.py), never from the
container's environment, which `docker inspect` shows. This process stays the parent of
the part: it passes on SIGTERM (PostgreSQL gets SIGINT, its fast shutdown), writes READY
once the part is ready (a service writes it itself; the compose file's health check looks
for it) and exits with the part's status, so
that the restart policy sees a crash.
"""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from deploy.compose import keeper
from deploy.local.credentials import Credentials
from deploy.local.parts import _database_ready, port_answers
from deploy.local.servers import PostgresServer, nats_server_binary

PART_FILE = Path("/run/determined/part.json")
NATS_CONFIG = Path("/run/determined/nats-server.conf")
# In the container's own /tmp, removed at each start (a restarted container keeps its files).
READY = Path("/tmp/determined-ready")
POSTGRES_HOME = Path("/var/lib/determined-es/postgres")
SERVICES = ("gateway", "scheduler", "searcher", "checkpoint")
POLL_S = 0.1


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python3 -m deploy.compose.part PART", file=sys.stderr)
        return 2
    READY.unlink(missing_ok=True)
    part = argv[0]
    settings = json.loads(PART_FILE.read_text()) if PART_FILE.exists() else {}
    if part == "nats-server":
        return nats(settings)
    if part == "postgres":
        return postgres(settings)
    if part == "keeper":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        keeper.keep(keeper.project_name(), READY.touch)
        return 0
    if part in SERVICES or part == "agent" or part.startswith("agent-"):
        return service(part, settings)
    print(f"no part called {part!r}", file=sys.stderr)
    return 2


def nats(settings: dict[str, str]) -> int:
    process = subprocess.Popen([nats_server_binary(), "-c", str(NATS_CONFIG)])
    return supervise(process, signal.SIGTERM, lambda: port_answers(int(settings["DET_NATS_PORT"])))


def postgres(settings: dict[str, str]) -> int:
    found = Credentials({}, settings["DET_POSTGRES_PASSWORD"], settings["DET_GATEWAY_DB_PASSWORD"])
    server = PostgresServer(
        POSTGRES_HOME / "data",
        int(settings["DET_POSTGRES_PORT"]),
        POSTGRES_HOME / "postgres.log",
        superuser_password=found.postgres_password,
    )
    process = server.spawn(sys.stdout.buffer)
    return supervise(process, signal.SIGINT, lambda: server.accepting() and _database_ready(server, found))


def service(part: str, settings: dict[str, str]) -> int:
    module = part if part in SERVICES else "agent"
    environment = dict(os.environ, **settings, DET_READY_FILE=str(READY))
    process = subprocess.Popen([sys.executable, "-m", f"services.{module}"], env=environment)
    return supervise(process, signal.SIGTERM, READY.exists)


def supervise(process: "subprocess.Popen[bytes]", stop: int, ready: Callable[[], bool]) -> int:
    """Passes SIGTERM and SIGINT on as `stop`, writes READY once `ready()`, and returns the
    part's exit status."""
    for received in (signal.SIGTERM, signal.SIGINT):
        signal.signal(received, lambda *_: process.send_signal(stop))
    while process.poll() is None and not READY.exists():
        if ready():
            READY.touch()
            break
        time.sleep(POLL_S)
    return process.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
