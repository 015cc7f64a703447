"""`det shell`: an ssh session in a task's environment on the cluster.

The task runs OpenSSH's sshd (determined/exec/shell.py says why a real one); `det shell
start` makes an ed25519 key pair here, sends the public key alone with the task, and runs
`ssh` with `-o ProxyCommand="det shell proxy ID"`: that hidden verb carries ssh's bytes
through a WebSocket to the gateway's /proxy/<id>/, behind the user's login, and the
gateway on to the task's sshd. So the task needs no port of its own open to the user,
and only the machine that started a shell holds its key (`open` and `show-ssh-command`
work there, and say so elsewhere).

Keys: `<CLI config folder>/shells/<task id>/key` (the folder that holds the login cache,
see _auth; folders 0700, the key 0600), with the host key ssh saw first in `known_hosts`
next to it (each shell makes its own host key).
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from determined.cli import _tasks
from determined.cli._client import CliError, Gateway, connect, master_address
from determined.exec.shell import LOGIN_NAME

SHELL = "SHELL"
# The CLI's settings a proxy command started by an editor must see to act as this user.
PROXY_VARIABLES = ("DET_CONFIG_DIR", "DET_MASTER_CERT_FILE", "DET_MASTER_CERT_NAME")
# Bytes read from ssh at once; the gateway sends frames of at most 64 KiB.
CHUNK_BYTES = 64 * 1024
MAX_FRAME_BYTES = 1024 * 1024
OPEN_TIMEOUT_S = 60.0


def add_parser(commands: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = commands.add_parser("shell", help="an ssh shell on the cluster, in a task's environment")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")
    parser.set_defaults(run=lambda _args: parser.print_help())

    start = verbs.add_parser("start", help="start a shell and open an ssh session in it")
    _tasks.add_launch_arguments(start)
    _add_ssh_arguments(start)
    start.set_defaults(run=start_shell)

    opening = verbs.add_parser("open", help="open another ssh session in a running shell")
    opening.add_argument("task_id", type=_tasks.task_id, metavar="ID")
    _add_ssh_arguments(opening)
    opening.set_defaults(run=open_shell)

    show = verbs.add_parser("show-ssh-command", help="the ssh command line (for an editor's remote mode)")
    show.add_argument("task_id", type=_tasks.task_id, metavar="ID")
    show.add_argument("ssh_opts", nargs="*", metavar="SSH_ARG", help="more ssh arguments (after --)")
    show.set_defaults(run=show_ssh_command)

    # ssh's ProxyCommand: not for people.
    proxy = verbs.add_parser("proxy")
    proxy.add_argument("task_id", type=_tasks.task_id, metavar="ID")
    proxy.set_defaults(run=proxy_shell)

    _tasks.add_shared_verbs(verbs, SHELL)


def _add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--show-ssh-command", action="store_true", help="also print the ssh command line (for an editor)"
    )
    parser.add_argument(
        "ssh_opts",
        nargs="*",
        metavar="SSH_ARG",
        help="more ssh arguments, after -- (e.g. -- -L 8888:localhost:8888)",
    )


# -- the verbs ------------------------------------------------------------------------------


def start_shell(args: argparse.Namespace) -> int:
    shells = shells_folder()
    pending = Path(tempfile.mkdtemp(dir=shells, prefix=".new-"))
    try:
        public_key = make_key(pending)
        gateway, task = _tasks.launch(args, SHELL, shell_public_key=public_key)
        if not _tasks.FULL_TASK_ID.match(task.id):  # it names a folder here
            raise CliError(f"the master answered with a task id that is not a UUID: {task.id[:80]!r}")
        pending.rename(shells / task.id)
    finally:
        shutil.rmtree(pending, ignore_errors=True)
    if args.detach:
        return 0
    return attach(args, gateway, task)


def open_shell(args: argparse.Namespace) -> int:
    gateway = connect(args)
    task = _tasks.get_task(gateway, _tasks.resolve(gateway, args.task_id, SHELL))
    _check_shell(task)
    return attach(args, gateway, task)


def _check_shell(task: Any) -> None:
    """A CliError unless `task` is a shell that has not ended (the key of one that has is removed)."""
    if task.task_type != SHELL:
        raise CliError(f"task {task.id} is a {_tasks.KIND_WORDS.get(task.task_type, 'task')}, not a shell")
    if task.state == _tasks.TERMINATED:
        shutil.rmtree(shells_folder() / task.id, ignore_errors=True)  # its key opens nothing now
        raise CliError(f"shell {task.id} has ended ({_tasks.exit_summary(task)})")


def show_ssh_command(args: argparse.Namespace) -> int:
    gateway = connect(args)
    task = _tasks.get_task(gateway, _tasks.resolve(gateway, args.task_id, SHELL))
    _check_shell(task)
    print(shlex.join(ssh_command_for(args, gateway, task.id, tty=None)))
    return 0


def attach(args: argparse.Namespace, gateway: Gateway, task: Any) -> int:
    """Waits until the shell's sshd answers, then runs ssh in it (interactive when stdin
    is a terminal; else it reads the commands from stdin); its exit code is ssh's."""
    command = ssh_command_for(args, gateway, task.id, tty=sys.stdin.isatty())
    task = _tasks.wait_ready(gateway, task)
    if args.show_ssh_command:
        print(shlex.join(command), flush=True)
    code = subprocess.run(command, check=False).returncode
    print(f"To reconnect, run: det shell open {task.id}")
    return code


def proxy_shell(args: argparse.Namespace) -> int:
    """ssh's ProxyCommand: stdin and stdout bridged to the shell's sshd through the gateway.
    Never asks for a password (stdin is ssh's): a user who must log in again is told so."""
    from websockets.exceptions import InvalidHandshake, InvalidStatus
    from websockets.sync.client import connect as open_websocket

    gateway = Gateway(master_address(args.master), user=args.user, password="")
    try:
        token = gateway.session.token()
    except CliError as refused:
        raise CliError(f"{refused}; log in first (det user login), then connect again") from None
    full_id = _tasks.resolve(gateway, args.task_id, SHELL)
    url = websocket_url(_tasks.proxy_url(gateway, full_id))
    try:
        websocket = open_websocket(
            url,
            additional_headers={"Authorization": f"Bearer {token}"} if token else {},
            compression=None,
            max_size=MAX_FRAME_BYTES,
            open_timeout=OPEN_TIMEOUT_S,
            **tls_options(gateway.tls, os.environ),
        )
    except InvalidStatus as refused:
        raise CliError(refusal(full_id, refused.response.status_code, refused.response.body)) from None
    except (InvalidHandshake, TimeoutError) as problem:
        raise CliError(f"cannot open a connection to shell {full_id} at {url}: {problem}") from None
    with websocket:
        bridge(websocket, sys.stdin.buffer.fileno(), sys.stdout.buffer.fileno())
    return 0


# -- ssh's command line ---------------------------------------------------------------------


def ssh_command_for(
    args: argparse.Namespace, gateway: Gateway, task_id: str, *, tty: bool | None
) -> list[str]:
    """The ssh command line into shell `task_id`, with this machine's key for it."""
    folder = shells_folder() / task_id
    key = folder / "key"
    if not key.is_file():
        raise CliError(
            f"this machine has no key for shell {task_id}: only the machine that started it can "
            f"connect (its key is in {folder} there); start a shell of your own here with det shell start"
        )
    ssh = shutil.which("ssh")
    if ssh is None:
        raise CliError(
            "ssh is not installed here: det shell needs OpenSSH's client (apt-get install openssh-client)"
        )
    proxy = proxy_command(
        python=sys.executable,
        master=master_address(args.master),
        user=args.user or gateway.session.user,
        task_id=task_id,
        environ=os.environ,
    )
    return ssh_command(
        ssh=ssh,
        key=key,
        known_hosts=folder / "known_hosts",
        proxy=proxy,
        task_id=task_id,
        tty=tty,
        extra=args.ssh_opts,
    )


def ssh_command(
    *,
    ssh: str,
    key: Path,
    known_hosts: Path,
    proxy: str,
    task_id: str,
    tty: bool | None,
    extra: Sequence[str],
) -> list[str]:
    """ssh into LOGIN_NAME@<task id> through `proxy`, with only `key`. The shell's host key
    is new with each shell: the first one seen is kept in `known_hosts` and checked after.
    `tty`: -t (a terminal), -T (commands from stdin), or None (neither: for an editor)."""
    terminal = [] if tty is None else ["-t" if tty else "-T"]
    return [
        ssh,
        "-o",
        f"ProxyCommand={proxy}",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "IdentitiesOnly=yes",
        "-i",
        str(key),
        *terminal,
        f"{LOGIN_NAME}@{task_id}",
        *extra,
    ]


def proxy_command(*, python: str, master: str, user: str, task_id: str, environ: Mapping[str, str]) -> str:
    """`det shell proxy ID` as ssh's ProxyCommand (run by a shell after ssh expands
    %-tokens): this Python, this master and user, and the CLI settings that say where its
    login is, so that an editor that runs it with an environment of its own gets the same."""
    settings = [f"{name}={environ[name]}" for name in PROXY_VARIABLES if environ.get(name)]
    words = [*(["env", *settings] if settings else []), python, "-m", "determined.cli", "-m", master]
    words += ["-u", user] if user else []
    return shlex.join([*words, "shell", "proxy", task_id]).replace("%", "%%")


def shells_folder() -> Path:
    """Where the shells' keys are kept (made, 0700, when missing)."""
    from determined.cli._auth import config_folder

    folder = config_folder() / "shells"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def make_key(folder: Path) -> str:
    """A new ed25519 key pair in `folder` (`key`, 0600, and `key.pub`): the public key line."""
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise CliError(
            "ssh-keygen is not installed here: det shell needs OpenSSH's client (apt-get install openssh-client)"
        )
    key = folder / "key"
    made = subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", "det shell", "-f", str(key)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise CliError(f"ssh-keygen could not make a key for the shell: {made.stderr.strip()}")
    key.chmod(0o600)
    return key.with_name("key.pub").read_text().strip()


# -- the proxy ------------------------------------------------------------------------------


def websocket_url(http_url: str) -> str:
    """The gateway's http(s):// URL as ws(s)://."""
    scheme, separator, rest = http_url.partition("://")
    return f"{'wss' if scheme == 'https' else 'ws'}{separator}{rest}"


def tls_options(tls: bool, environ: Mapping[str, str]) -> dict[str, Any]:
    """The WebSocket's TLS settings: Determined's variables, as the CLI's gRPC channel
    takes them (DET_MASTER_CERT_FILE the certificate to trust, DET_MASTER_CERT_NAME the name)."""
    if not tls:
        return {}
    import ssl

    options: dict[str, Any] = {
        "ssl": ssl.create_default_context(cafile=environ.get("DET_MASTER_CERT_FILE") or None)
    }
    if environ.get("DET_MASTER_CERT_NAME"):
        options["server_hostname"] = environ["DET_MASTER_CERT_NAME"]
    return options


def refusal(task_id: str, status: int, body: bytes | bytearray | None) -> str:
    """What the gateway's refusal to open the shell's connection means."""
    if status == 401:
        return "the gateway does not know your login: log in again with det user login"
    if status == 403:
        return f"shell {task_id} is another user's"
    if status == 404:
        return f"there is no shell {task_id}"
    return f"shell {task_id} cannot be reached (HTTP {status}): {_message(body)}"


def _message(body: bytes | bytearray | None) -> str:
    """The gateway's error message in a refusal's JSON body, else its text."""
    import json

    text = (body or b"").decode("utf-8", "replace").strip()
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:500]


def bridge(websocket: Any, source: int, sink: int) -> None:
    """Bytes from `source` go out as binary frames; frames are written to `sink`, until
    the gateway closes (sshd ended the connection) or `source` ends (ssh is done)."""
    from websockets.exceptions import ConnectionClosedError

    sender = threading.Thread(target=_send_all, args=(websocket, source), daemon=True)
    sender.start()
    try:
        for message in websocket:
            _write_all(sink, message if isinstance(message, bytes) else message.encode())
    except ConnectionClosedError as lost:
        raise CliError(f"the connection to the shell was lost: {lost}") from None
    except BrokenPipeError:
        pass  # ssh went away


def _send_all(websocket: Any, source: int) -> None:
    from websockets.exceptions import ConnectionClosed

    try:
        while chunk := os.read(source, CHUNK_BYTES):
            websocket.send(chunk)
    except (ConnectionClosed, OSError):
        pass
    websocket.close()


def _write_all(sink: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(sink, view) :]
