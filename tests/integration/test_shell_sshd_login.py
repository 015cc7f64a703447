"""The real sshd a `det shell` task prepares (determined/exec/shell.py), logged into
with the real ssh client."""

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.servers import free_port
from determined.exec import shell

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDGPVjFX7UvrFZ6RHCj+wiDYNyMvV+m/KtP0sdqI9HJI det shell"
HAS_OPENSSH = all(
    shutil.which(p, path="/usr/sbin:/usr/bin:/sbin:/bin") for p in ("sshd", "ssh", "ssh-keygen")
)
# Generous: a bound against hangs on a loaded machine, not a timing.
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("client") / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory, client_key: Path) -> Iterator[tuple[int, Path]]:
    """`python -m determined.exec.shell` in a work dir, as the agent starts it."""
    if not HAS_OPENSSH:
        pytest.skip("OpenSSH (sshd, ssh, ssh-keygen) is not installed: apt-get install openssh-server")
    try:
        shell.find_nss_wrapper()
    except shell.ShellSetupError as missing:
        pytest.skip(str(missing))
    work_dir = tmp_path_factory.mktemp("work")
    port = free_port()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(work_dir),
        "DET_TASK_HOST": "127.0.0.1",
        "DET_TASK_PORT": str(port),
        "DET_TASK_ID": "shell-test",
        "DET_SHELL_PUBLIC_KEY": client_key.with_name("key.pub").read_text(),
        "TASK_SETTING": "from the task",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "determined.exec.shell"],
        cwd=work_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_listening(port, process)
        yield port, work_dir
    finally:
        process.terminate()
        process.wait(timeout=DEADLINE_S)
        assert process.stdout is not None
        process.stdout.close()


def _wait_listening(port: int, process: "subprocess.Popen[str]") -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            assert process.stdout is not None
            pytest.fail(f"sshd ended (exit {process.returncode}):\n{process.stdout.read()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"sshd did not listen on port {port} within {DEADLINE_S} s")


def _ssh(port: int, key: Path, *args: str, stdin: str = "") -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [
            "ssh",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-i",
            str(key),
            "-p",
            str(port),
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )


def test_commands_on_stdin_run_as_this_user_in_the_work_dir_with_the_task_environment(
    sshd: tuple[int, Path], client_key: Path
) -> None:
    port, work_dir = sshd
    ran = _ssh(
        port,
        client_key,
        "-T",
        f"{shell.LOGIN_NAME}@127.0.0.1",
        stdin='id -u\npwd\necho "$TASK_SETTING"\nexit\n',
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [str(os.getuid()), str(work_dir), "from the task"]


def test_a_command_exits_with_its_own_code(sshd: tuple[int, Path], client_key: Path) -> None:
    port, _ = sshd
    ran = _ssh(port, client_key, f"{shell.LOGIN_NAME}@127.0.0.1", "echo hi; exit 3")
    assert (ran.returncode, ran.stdout) == (3, "hi\n")


def test_another_key_is_refused(sshd: tuple[int, Path], tmp_path: Path) -> None:
    port, _ = sshd
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    ran = _ssh(port, other, f"{shell.LOGIN_NAME}@127.0.0.1", "true")
    assert ran.returncode == 255
    assert "Permission denied" in ran.stderr


def test_the_state_folder_is_this_users_alone(sshd: tuple[int, Path]) -> None:
    _, work_dir = sshd
    folder = work_dir / shell.STATE_FOLDER
    assert folder.stat().st_mode & 0o777 == 0o700
    for name in ("host_key", "authorized_keys", "environment", "passwd", "sshd_config"):
        assert (folder / name).stat().st_mode & 0o077 == 0, name


def test_a_task_without_a_key_ends_at_once_saying_why(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DET_TASK_HOST": "127.0.0.1", "DET_TASK_PORT": "2222"}
    ran = subprocess.run(
        [sys.executable, "-m", "determined.exec.shell"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert ran.returncode == 1
    assert "DET_SHELL_PUBLIC_KEY is empty" in ran.stderr
