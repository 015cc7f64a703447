"""`python -m determined.exec.shell`: the process of a `det shell` task, an OpenSSH
server for one user's key.

Why sshd, not a terminal of our own: editors' remote modes (VS Code Remote-SSH, PyCharm's
SSH interpreters) and scp/sftp/port forwarding need a real ssh server. The CLI reaches it
with `ssh -o ProxyCommand="det shell proxy ID"`, through the gateway's /proxy/<id>/ behind
the user's login (determined/cli/shell.py).

It runs as the task's user (never root on a cluster: the agent's trial user), so sshd runs
unprivileged: it can only log that user in, and it reads that user's entry from the
system's user database, where the trial user has no login shell (`nologin`) and a container
has no entry at all. So sshd is given a database of its own through nss_wrapper (Debian's
libnss-wrapper, preloaded into sshd alone): the one user LOGIN_NAME, with the task's uid
and gid, the work dir as its home (a session starts there), and as its shell a small
script that sets the task's environment and runs bash. A session's programs use the
system's database as any process does (`id` names the trial user).

Everything is written to STATE_FOLDER in the work dir (0700; the host key is made there,
the task's key in authorized_keys, no password, PAM or host-based login), then this
process becomes `sshd -D -e` (its log is the task's log; the agent's kill reaches it).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from determined.common.ssh_keys import public_key_problem

# The user the CLI logs in as (`ssh det@<task id>`): the one user of sshd's database.
LOGIN_NAME = "det"
# In the work dir: sshd's config, keys, user database and the session's shell and environment.
STATE_FOLDER = ".det-shell"
# Where Debian and other distributions put sshd and nss_wrapper.
SSHD_DIRS = ("/usr/sbin", "/usr/local/sbin", "/sbin")
NSS_WRAPPER_GLOBS = (
    "/usr/lib/*/libnss_wrapper.so",
    "/usr/lib64/libnss_wrapper.so",
    "/usr/lib/libnss_wrapper.so",
)
# Not carried into a session: what sshd sets for each session, and what is this process's alone.
SESSION_VARIABLES = frozenset(
    {"_", "PWD", "OLDPWD", "SHLVL", "TERM", "SHELL", "LD_PRELOAD", "NSS_WRAPPER_PASSWD", "NSS_WRAPPER_GROUP"}
)
# sshd's empty folder when it runs as root.
PRIVILEGE_SEPARATION_DIR = "/run/sshd"
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A host name or IP address (it is written into sshd's config as it is).
HOST = re.compile(r"^[A-Za-z0-9.:%_-]{1,255}$")


class ShellSetupError(Exception):
    """This machine or the task's settings cannot run the shell: says what is missing."""


def authorized_key(text: str) -> str:
    """The public key line DET_SHELL_PUBLIC_KEY holds, checked (determined.common.ssh_keys)."""
    line = text.strip()
    problem = public_key_problem(line)
    if problem:
        raise ShellSetupError(f"DET_SHELL_PUBLIC_KEY {problem}: the shell has no key to let in")
    return line


def quoted(value: str) -> str:
    """A value in sshd_config: in double quotes, so that spaces and `#` are kept."""
    if any(c in value for c in '"\n\r\\'):
        raise ShellSetupError(
            f"sshd cannot be given the path {value!r}: it holds a quote, backslash or newline"
        )
    return f'"{value}"'


def sshd_config(*, host: str, port: int, folder: Path) -> str:
    """sshd's whole config: the task's address, keys from `folder` only, nothing but
    public key logins of LOGIN_NAME; port forwarding and sftp on, as editors need."""
    keys = str(folder / "authorized_keys").replace("%", "%%")  # sshd expands %-tokens here
    return "\n".join(
        [
            "# det shell: the sshd of one task, run as the task's user (determined/exec/shell.py)",
            f"ListenAddress {host}",
            f"Port {port}",
            f"HostKey {quoted(str(folder / 'host_key'))}",
            f"PidFile {quoted(str(folder / 'sshd.pid'))}",
            f"AuthorizedKeysFile {quoted(keys)}",
            f"AllowUsers {LOGIN_NAME}",
            "AuthenticationMethods publickey",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "PermitEmptyPasswords no",
            "UsePAM no",
            # The work dir is the task user's, and may be open to its group or others.
            "StrictModes no",
            "PermitUserRC no",
            "PermitUserEnvironment no",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            # A client gone without a word (laptop closed) is noticed within two minutes.
            "ClientAliveInterval 30",
            "ClientAliveCountMax 4",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def passwd_entry(*, uid: int, gid: int, home: Path, shell: Path) -> str:
    """LOGIN_NAME's line in sshd's user database (passwd(5))."""
    fields = [LOGIN_NAME, "x", str(uid), str(gid), "det shell", str(home), str(shell)]
    if any(":" in field or "\n" in field for field in fields):
        raise ShellSetupError(f"the work dir {home} cannot be a home folder: its path holds ':' or a newline")
    return ":".join(fields) + "\n"


def group_entry(gid: int) -> str:
    return f"{LOGIN_NAME}:x:{gid}:\n"


def privilege_separation_entry() -> str:
    """sshd's own unprivileged user (`sshd`), which sshd needs when it runs as root (a
    process agent that runs tasks as root): the system's, else `nobody`'s ids."""
    import pwd

    try:
        found = pwd.getpwnam("sshd")
        uid, gid = found.pw_uid, found.pw_gid
    except KeyError:
        uid = gid = 65534
    return f"sshd:x:{uid}:{gid}:sshd:{PRIVILEGE_SEPARATION_DIR}:/usr/sbin/nologin\n"


def environment_script(environ: Mapping[str, str]) -> str:
    """The task's environment as `export NAME='value'` lines, sourced by every session
    (sshd starts sessions with an environment of its own)."""
    names = sorted(
        name
        for name in environ
        if VARIABLE_NAME.match(name) and name not in SESSION_VARIABLES and not name.startswith("SSH_")
    )
    return "".join(f"export {name}={shlex.quote(environ[name])}\n" for name in names)


def login_shell_script(environment: Path, shell: str) -> str:
    """The session's shell (LOGIN_NAME's in sshd's database): the task's environment, then
    `shell` with sshd's arguments (`-c COMMAND`, or none for an interactive session).
    Not a login shell: a system profile would reset PATH and lose the task's."""
    return f'#!/bin/sh\n. {shlex.quote(str(environment))}\nexec {shlex.quote(shell)} "$@"\n'


def find_program(name: str, folders: tuple[str, ...]) -> str:
    """The absolute path of a program (sshd must be started by one)."""
    found = shutil.which(name, path=os.pathsep.join([*folders, os.environ.get("PATH", "")]))
    if found is None:
        raise ShellSetupError(
            f"{name} is not installed here: det shell needs OpenSSH (sshd, ssh-keygen) in the task's "
            "environment (Debian and Ubuntu: apt-get install openssh-server libnss-wrapper)"
        )
    return os.path.abspath(found)


def find_nss_wrapper() -> str:
    from glob import glob

    for pattern in NSS_WRAPPER_GLOBS:
        for path in sorted(glob(pattern)):
            return path
    raise ShellSetupError(
        "libnss_wrapper.so is not installed here: det shell needs it to run sshd as the task's user "
        "(Debian and Ubuntu: apt-get install libnss-wrapper)"
    )


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """`text` in a new file of this user's alone (an old one is replaced)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def make_host_key(folder: Path) -> None:
    key = folder / "host_key"
    for old in (key, key.with_suffix(".pub")):
        old.unlink(missing_ok=True)
    made = subprocess.run(
        [
            find_program("ssh-keygen", ("/usr/bin",)),
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "det-shell",
            "-f",
            str(key),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise ShellSetupError(f"ssh-keygen could not make the host key: {made.stderr.strip()}")


def task_address(environ: Mapping[str, str]) -> tuple[str, int]:
    """DET_TASK_HOST and DET_TASK_PORT, checked."""
    host = environ.get("DET_TASK_HOST", "").strip()
    port = environ.get("DET_TASK_PORT", "").strip()
    if not HOST.match(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ShellSetupError(
            f"DET_TASK_HOST and DET_TASK_PORT must name an address and port, not {host!r}:{port!r}"
        )
    return host, int(port)


def prepare(work_dir: Path, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """Writes STATE_FOLDER; returns sshd's command line and environment."""
    host, port = task_address(environ)
    key = authorized_key(environ.get("DET_SHELL_PUBLIC_KEY", ""))
    sshd, nss_wrapper = find_program("sshd", SSHD_DIRS), find_nss_wrapper()
    folder = work_dir / STATE_FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    folder.chmod(0o700)
    make_host_key(folder)
    write_private(folder / "authorized_keys", key + "\n")
    write_private(folder / "environment", environment_script(environ))
    shell = folder / "shell"
    bash = shutil.which("bash") or "/bin/sh"
    write_private(shell, login_shell_script(folder / "environment", bash), mode=0o700)
    users = passwd_entry(uid=os.getuid(), gid=os.getgid(), home=work_dir, shell=shell)
    if os.geteuid() == 0:
        users += privilege_separation_entry()
        os.makedirs(PRIVILEGE_SEPARATION_DIR, mode=0o755, exist_ok=True)
    write_private(folder / "passwd", users)
    write_private(folder / "group", group_entry(os.getgid()))
    write_private(folder / "sshd_config", sshd_config(host=host, port=port, folder=folder))
    env = {
        **environ,
        "LD_PRELOAD": nss_wrapper,
        "NSS_WRAPPER_PASSWD": str(folder / "passwd"),
        "NSS_WRAPPER_GROUP": str(folder / "group"),
    }
    return [sshd, "-D", "-e", "-f", str(folder / "sshd_config")], env


def main() -> int:
    try:
        command, env = prepare(Path.cwd(), os.environ)
    except (ShellSetupError, OSError) as problem:
        print(f"det shell: {problem}", file=sys.stderr)
        return 1
    print(
        f"det shell: starting sshd for {LOGIN_NAME}@{os.environ.get('DET_TASK_ID', '')}",
        file=sys.stderr,
        flush=True,
    )
    os.execve(command[0], command, env)


if __name__ == "__main__":
    sys.exit(main())
