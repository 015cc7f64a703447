"""`det shell`'s own parts (determined/cli/shell.py): ssh's command line and ProxyCommand,
the shell's key, what a refusal means, and the bridge between ssh and a (real, local)
WebSocket server."""

import argparse
import os
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.server import Server, ServerConnection, serve

from determined.cli import shell
from determined.cli.__main__ import build_parser
from determined.cli._client import CliError
from determined.exec.shell import LOGIN_NAME, authorized_key

TASK = "0b5e2a36-8f0e-4d7c-9a51-2f3c4d5e6f70"
DEADLINE_S = 60.0


def _ssh(tty: bool | None, extra: tuple[str, ...] = ()) -> list[str]:
    return shell.ssh_command(
        ssh="/usr/bin/ssh",
        key=Path("/cfg/shells/t/key"),
        known_hosts=Path("/cfg/shells/t/known_hosts"),
        proxy="python -m determined.cli shell proxy t",
        task_id=TASK,
        tty=tty,
        extra=extra,
    )


def test_ssh_logs_in_with_the_shells_key_alone_through_the_proxy_command() -> None:
    command = _ssh(None)
    assert command[0] == "/usr/bin/ssh"
    assert command[-1] == f"{LOGIN_NAME}@{TASK}"
    options = [command[i + 1] for i, word in enumerate(command) if word == "-o"]
    assert options == [
        "ProxyCommand=python -m determined.cli shell proxy t",
        "StrictHostKeyChecking=accept-new",
        "UserKnownHostsFile=/cfg/shells/t/known_hosts",
        "IdentitiesOnly=yes",
    ]
    assert command[command.index("-i") + 1] == "/cfg/shells/t/key"
    assert "-t" not in command and "-T" not in command


def test_a_terminal_gets_one_and_piped_commands_do_not() -> None:
    assert "-t" in _ssh(True) and "-T" not in _ssh(True)
    assert "-T" in _ssh(False) and "-t" not in _ssh(False)


def test_the_users_ssh_arguments_come_after_the_destination() -> None:
    command = _ssh(True, ("-L", "8888:localhost:8888", "nvidia-smi"))
    assert command[-4:] == [f"{LOGIN_NAME}@{TASK}", "-L", "8888:localhost:8888", "nvidia-smi"]


def test_the_proxy_command_names_this_python_master_and_user_and_where_the_login_is() -> None:
    text = shell.proxy_command(
        python="/opt/my venv/bin/python",
        master="https://master:8080",
        user="alice",
        task_id=TASK,
        environ={"DET_CONFIG_DIR": "/home/a/100% det", "DET_MASTER_CERT_FILE": "/ca.pem", "OTHER": "x"},
    )
    # ssh expands %-tokens, then runs it with a shell.
    assert shlex.split(text.replace("%%", "%")) == [
        "env",
        "DET_CONFIG_DIR=/home/a/100% det",
        "DET_MASTER_CERT_FILE=/ca.pem",
        "/opt/my venv/bin/python",
        "-m",
        "determined.cli",
        "-m",
        "https://master:8080",
        "-u",
        "alice",
        "shell",
        "proxy",
        TASK,
    ]
    assert "%%" in text


def test_without_settings_or_user_the_proxy_command_is_the_cli_alone() -> None:
    text = shell.proxy_command(python="/py", master="localhost:8080", user="", task_id=TASK, environ={})
    assert shlex.split(text) == [
        "/py",
        "-m",
        "determined.cli",
        "-m",
        "localhost:8080",
        "shell",
        "proxy",
        TASK,
    ]


def test_ssh_arguments_are_taken_after_a_double_dash() -> None:
    args = build_parser().parse_args(["shell", "open", TASK[:8], "--", "-L", "1:localhost:2", "ls", "-la"])
    assert (args.task_id, args.ssh_opts) == (TASK[:8], ["-L", "1:localhost:2", "ls", "-la"])
    started = build_parser().parse_args(["shell", "start", "--config", "resources.slots=0", "-d"])
    assert (started.detach, started.ssh_opts, started.config) == (True, [], ["resources.slots=0"])


def test_the_proxy_verb_is_not_offered_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["shell", "--help"])
    assert "proxy" not in capsys.readouterr().out


def test_a_shells_key_is_an_ed25519_pair_of_this_users_alone(tmp_path: Path) -> None:
    public = shell.make_key(tmp_path)
    assert public.startswith("ssh-ed25519 ")
    assert authorized_key(public) == public  # what the task takes
    assert (tmp_path / "key").stat().st_mode & 0o777 == 0o600


def test_keys_are_kept_in_the_cli_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "cfg"))
    folder = shell.shells_folder()
    assert folder == tmp_path / "cfg" / "shells"
    assert folder.stat().st_mode & 0o777 == 0o700


def test_without_the_key_another_machine_is_told_it_cannot_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path))
    args = argparse.Namespace(master="localhost:8080", user="alice", ssh_opts=[])
    with pytest.raises(
        CliError, match="this machine has no key for shell .* only the machine that started it"
    ):
        shell.ssh_command_for(args, gateway=None, task_id=TASK, tty=None)  # type: ignore[arg-type]


def test_websocket_urls_follow_the_gateways_scheme() -> None:
    assert shell.websocket_url(f"http://h:8081/proxy/{TASK}/") == f"ws://h:8081/proxy/{TASK}/"
    assert shell.websocket_url(f"https://h:8081/proxy/{TASK}/") == f"wss://h:8081/proxy/{TASK}/"


def test_tls_trusts_the_masters_certificate_and_name() -> None:
    assert shell.tls_options(False, {"DET_MASTER_CERT_FILE": "/x"}) == {}
    options = shell.tls_options(True, {"DET_MASTER_CERT_NAME": "master.internal"})
    assert options["server_hostname"] == "master.internal"
    assert "ssl" in options


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (401, b"", "log in again"),
        (403, b"", f"shell {TASK} is another user's"),
        (404, b"", f"there is no shell {TASK}"),
        (
            502,
            b'{"code":14,"message":"shell ended: exit code 1","details":[]}',
            "(HTTP 502): shell ended: exit code 1",
        ),
        (502, b"Bad Gateway", "(HTTP 502): Bad Gateway"),
    ],
)
def test_a_refusal_says_what_it_means(status: int, body: bytes, says: str) -> None:
    assert says in shell.refusal(TASK, status, body)


# -- the bridge, against a real WebSocket server --------------------------------------------


@pytest.fixture
def echo_server() -> Iterator[Server]:
    """Greets, then sends back every frame it gets; closes (1000) after "bye"."""

    def handle(connection: ServerConnection) -> None:
        connection.send(b"greeting\n")
        for message in connection:
            if message == b"bye":
                return
            connection.send(message)

    with serve(handle, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server
        server.shutdown()
        thread.join(DEADLINE_S)


def _url(server: Server) -> str:
    host, port = server.socket.getsockname()[:2]
    return f"ws://{host}:{port}/proxy/{TASK}/"


def _read(fd: int, size: int) -> bytes:
    """`size` bytes, or fewer when the writer closes first."""
    got = b""
    while len(got) < size:
        chunk = os.read(fd, size - len(got))
        if not chunk:
            break
        got += chunk
    return got


def _bridged(server: Server) -> tuple[threading.Thread, int, int]:
    """A bridge in a thread: returns it, the write end of its source, the read end of its sink."""
    from websockets.sync.client import connect

    source_read, source_write = os.pipe()
    sink_read, sink_write = os.pipe()
    websocket = connect(_url(server), open_timeout=DEADLINE_S)

    def run() -> None:
        try:
            with websocket:
                shell.bridge(websocket, source_read, sink_write)
        finally:
            os.close(source_read)
            os.close(sink_write)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, source_write, sink_read


def test_bytes_go_both_ways_until_the_input_ends(echo_server: Server) -> None:
    thread, source, sink = _bridged(echo_server)
    assert _read(sink, 9) == b"greeting\n"
    payload = os.urandom(48 * 1024)  # binary; less than a pipe holds, so no writer waits on a reader
    os.write(source, payload)
    assert _read(sink, len(payload)) == payload
    os.close(source)
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    os.close(sink)


def test_the_bridge_ends_when_the_server_closes(echo_server: Server) -> None:
    thread, source, sink = _bridged(echo_server)
    assert _read(sink, 9) == b"greeting\n"
    os.write(source, b"bye")
    thread.join(DEADLINE_S)
    assert not thread.is_alive()
    assert os.read(sink, 10) == b""  # the bridge closed its output
    os.close(source)
    os.close(sink)
