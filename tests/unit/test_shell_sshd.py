"""The sshd of a `det shell` task (determined/exec/shell.py): its config, user database,
session environment and checks of the task's settings (tests/integration/test_shell_sshd.py
logs into the real sshd it prepares)."""

import shutil
import subprocess
from pathlib import Path

import pytest

from determined.common.limits import MAX_PUBLIC_KEY_BYTES
from determined.exec import shell

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDGPVjFX7UvrFZ6RHCj+wiDYNyMvV+m/KtP0sdqI9HJI det shell"
HAS_OPENSSH = all(
    shutil.which(p, path="/usr/sbin:/usr/bin:/sbin:/bin") for p in ("sshd", "ssh", "ssh-keygen")
)
# Generous: a bound against hangs on a loaded machine, not a timing.
DEADLINE_S = 60.0


def test_a_public_key_line_is_taken_as_it_is() -> None:
    assert shell.authorized_key(f"  {KEY}\n") == KEY
    assert shell.authorized_key(KEY.rsplit(" ", 2)[0]) == KEY.rsplit(" ", 2)[0]  # no comment


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        (f"{KEY}\n{KEY}", "is not one line"),
        (f"{KEY}\x00", "is not one line"),
        (f'command="rm -rf ~" {KEY}', "is not an OpenSSH public key line"),
        ("ssh-ed25519 not*base64", "has no base64 key"),
        ("ssh-ed25519", "has no base64 key"),
        ("ssh-ed25519 " + "A" * 20_000, f"is over {MAX_PUBLIC_KEY_BYTES} bytes"),
    ],
)
def test_anything_but_one_public_key_is_refused_naming_the_variable(text: str, says: str) -> None:
    with pytest.raises(shell.ShellSetupError, match="^DET_SHELL_PUBLIC_KEY ") as refused:
        shell.authorized_key(text)
    assert says in str(refused.value)


def test_the_config_lets_in_only_the_key_of_the_login_user() -> None:
    text = shell.sshd_config(host="10.0.0.7", port=2201, folder=Path("/work/w 1/.det-shell"))
    lines = text.splitlines()
    for line in [
        "ListenAddress 10.0.0.7",
        "Port 2201",
        'HostKey "/work/w 1/.det-shell/host_key"',
        'AuthorizedKeysFile "/work/w 1/.det-shell/authorized_keys"',
        'PidFile "/work/w 1/.det-shell/sshd.pid"',
        f"AllowUsers {shell.LOGIN_NAME}",
        "AuthenticationMethods publickey",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "PermitUserEnvironment no",
        "AllowTcpForwarding yes",
        "Subsystem sftp internal-sftp",
    ]:
        assert line in lines
    assert text.endswith("\n")


def test_a_percent_in_the_keys_path_is_not_a_token_to_sshd() -> None:
    text = shell.sshd_config(host="127.0.0.1", port=1, folder=Path("/w/100%/.det-shell"))
    assert 'AuthorizedKeysFile "/w/100%%/.det-shell/authorized_keys"' in text.splitlines()
    assert 'HostKey "/w/100%/.det-shell/host_key"' in text.splitlines()


def test_a_path_sshd_cannot_be_given_is_said() -> None:
    with pytest.raises(shell.ShellSetupError, match="quote"):
        shell.sshd_config(host="127.0.0.1", port=1, folder=Path('/w/a"b'))


def test_the_user_database_has_the_login_user_with_the_task_ids_home_and_shell() -> None:
    entry = shell.passwd_entry(
        uid=995, gid=994, home=Path("/w/trial"), shell=Path("/w/trial/.det-shell/shell")
    )
    assert entry == f"{shell.LOGIN_NAME}:x:995:994:det shell:/w/trial:/w/trial/.det-shell/shell\n"
    assert shell.group_entry(994) == f"{shell.LOGIN_NAME}:x:994:\n"
    with pytest.raises(shell.ShellSetupError, match="':'"):
        shell.passwd_entry(uid=1, gid=1, home=Path("/w:x"), shell=Path("/s"))


def test_the_session_gets_the_task_environment_quoted_less_what_sshd_sets() -> None:
    script = shell.environment_script(
        {
            "PATH": "/venv/bin:/usr/bin",
            "DET_TASK_ID": "t-1",
            "ODD": 'it\'s "quoted"\nand $(not run)',
            "TERM": "dumb",
            "SHLVL": "3",
            "LD_PRELOAD": "/lib/x.so",
            "SSH_AUTH_SOCK": "/tmp/a",
            "BASH_FUNC_f%%": "() { :; }",
        }
    )
    assert script.splitlines()[0] == "export DET_TASK_ID=t-1"
    env = {"PATH": "/usr/bin:/bin"}
    printed = subprocess.run(
        ["sh", "-c", script + 'printf "%s|%s|%s|%s" "$PATH" "$ODD" "${TERM-unset}" "${SSH_AUTH_SOCK-unset}"'],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert printed == '/venv/bin:/usr/bin|it\'s "quoted"\nand $(not run)|unset|unset'


def test_the_login_shell_sources_the_environment_then_runs_the_shell_with_sshds_arguments(
    tmp_path: Path,
) -> None:
    environment = tmp_path / "it's env"
    environment.write_text("export GREETING='hi there'\n")
    wrapper = tmp_path / "shell"
    wrapper.write_text(shell.login_shell_script(environment, "/bin/sh"))
    wrapper.chmod(0o700)
    ran = subprocess.run([str(wrapper), "-c", 'echo "$GREETING"'], capture_output=True, text=True, check=True)
    assert ran.stdout == "hi there\n"


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"DET_TASK_HOST": "127.0.0.1"},
        {"DET_TASK_HOST": "h", "DET_TASK_PORT": "0"},
        {"DET_TASK_PORT": "22"},
        {"DET_TASK_HOST": "h\nPermitRootLogin yes", "DET_TASK_PORT": "22"},
    ],
)
def test_the_task_address_must_be_given(environ: dict[str, str]) -> None:
    assert shell.task_address({"DET_TASK_HOST": "::1", "DET_TASK_PORT": "2222"}) == ("::1", 2222)
    with pytest.raises(shell.ShellSetupError, match="DET_TASK_HOST and DET_TASK_PORT"):
        shell.task_address(environ)


def test_a_missing_program_names_the_packages_to_install() -> None:
    with pytest.raises(shell.ShellSetupError, match="apt-get install openssh-server libnss-wrapper"):
        shell.find_program("no-such-sshd-here", ())


# -- the real sshd --------------------------------------------------------------------------
