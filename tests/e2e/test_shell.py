"""`det shell` through the real CLI against the session's cluster (cluster-up's gateway,
scheduler and process agent): commands fed on stdin run in the shell's sshd as the task's
user, through the gateway's proxy; `open` and the line `show-ssh-command` prints (run with
an editor's bare environment) reach it again; kill ends it."""

import os
import pwd
import shlex
import subprocess
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, det, wait_for

from deploy.local.trial_home import DEFAULT_TRIAL_USER
from determined.exec.shell import ShellSetupError, find_nss_wrapper, find_program

# The agent's start of the task and sshd's; bounds against hangs.
DEADLINE_S = 120.0


def _openssh_missing() -> str:
    try:
        find_program("sshd", ("/usr/sbin",))
        find_program("ssh", ())
        find_nss_wrapper()
    except ShellSetupError as missing:
        return str(missing)
    return ""


MISSING = _openssh_missing()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(bool(MISSING), reason=MISSING)]


def task_uid() -> int:
    """Who the cluster's agent runs tasks as: the trial user as root (cluster-up's default)."""
    return pwd.getpwnam(DEFAULT_TRIAL_USER).pw_uid if os.geteuid() == 0 else os.getuid()


def launched_id(output: str) -> str:
    line = next(line for line in output.splitlines() if line.startswith("Launched shell"))
    return line.split("(id: ", 1)[1].split(",", 1)[0]


def test_a_shell_runs_commands_from_stdin_reopens_and_ends_when_killed(cluster: Cluster) -> None:
    started = det(cluster.env, "shell", "start", stdin='id\necho "task $DET_TASK_ID"\nexit\n')
    assert started.returncode == 0, started.stdout + started.stderr
    shell_id = launched_id(started.stdout)
    uid = task_uid()
    assert f"uid={uid}(" in started.stdout, started.stdout + started.stderr
    assert f"task {shell_id}\n" in started.stdout
    assert f"To reconnect, run: det shell open {shell_id}" in started.stdout

    reopened = cluster.det("shell", "open", shell_id[:8], "--", "id -u; exit 4", check=False)
    assert reopened.returncode == 4, reopened.stdout + reopened.stderr
    assert reopened.stdout.startswith(f"{uid}\n")

    # What an editor runs: the printed line alone, without the CLI's environment.
    line = cluster.det("shell", "show-ssh-command", shell_id).stdout.strip()
    bare = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/")}
    editor = subprocess.run(
        [*shlex.split(line), "-T", "echo from-an-editor"],
        env=bare,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert editor.stdout == "from-an-editor\n", editor.stderr

    cluster.det("shell", "kill", shell_id)
    wait_for(
        lambda: cluster.json("shell", "describe", shell_id)["state"] == "TERMINATED",
        f"shell {shell_id} to end",
        DEADLINE_S,
    )
    gone = cluster.det("shell", "open", shell_id, check=False)
    assert gone.returncode == 1 and f"shell {shell_id} has ended" in gone.stderr
    assert not (Path(cluster.env["DET_CONFIG_DIR"]) / "shells" / shell_id).exists()  # nor its key
    proxied = cluster.det("shell", "proxy", shell_id, check=False)
    assert proxied.returncode == 1 and f"shell {shell_id} cannot be reached (HTTP 502)" in proxied.stderr


def test_a_shell_key_stays_on_the_machine_that_started_it(cluster: Cluster, tmp_path: Path) -> None:
    shell_id = cluster.det("shell", "start", "-d").stdout.strip()
    elsewhere = {**cluster.env, "DET_CONFIG_DIR": str(tmp_path)}  # another machine: no key, no login
    det(elsewhere, "user", "login", "admin", stdin=f"{cluster.password}\n")
    refused = det(elsewhere, "shell", "open", shell_id)
    assert refused.returncode == 1
    assert f"this machine has no key for shell {shell_id}" in refused.stderr
    cluster.det("shell", "kill", shell_id)
