"""`python3 -m determined.exec.notebook`: a notebook task's JupyterLab.

The agent starts it with the task contract's variables: it serves on
DET_TASK_HOST:DET_TASK_PORT under DET_PROXY_PREFIX (the path the gateway's
proxy forwards, unchanged), in the working directory (the task's folder,
holding its context), and opens no browser.

Who may use it: every request must carry the task's token (DET_TASK_TOKEN,
which the gateway's proxy sends as `Authorization: token ...` once it has
checked the user's login), so that no other user of the machine, and no
other container on its network, drives the notebook. The token goes to
Jupyter in its environment, never on its command line (which every local user
can read). Requests come through the gateway, with its host name (the proxy
keeps the browser's Host header): Jupyter must take a host that is not this
machine's; its origin check still holds (the page and its requests are the
gateway's origin), and its XSRF check is skipped for token-authenticated
requests.
"""

import importlib.util
import os
import sys
from pathlib import Path

PROG = "python3 -m determined.exec.notebook"


class NotebookError(Exception):
    """What stops the notebook before JupyterLab starts."""


def jupyter_argv(env: dict[str, str], root_dir: str) -> list[str]:
    """JupyterLab's command line, from the task contract's variables."""
    try:
        host, port, prefix = env["DET_TASK_HOST"], env["DET_TASK_PORT"], env["DET_PROXY_PREFIX"]
    except KeyError as missing:
        raise NotebookError(f"{missing.args[0]} is not set: the agent starts notebooks") from None
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.ip={host}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.base_url={prefix}",
        f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.open_browser=False",
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.trust_xheaders=True",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # An agent run as root with no trial user runs tasks as root (it warns): so be it.
        f"--ServerApp.allow_root={os.geteuid() == 0}",
    ]


def jupyter_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment Jupyter runs with: the task's, its token as JUPYTER_TOKEN."""
    token = env.get("DET_TASK_TOKEN", "")
    if not token:
        raise NotebookError("DET_TASK_TOKEN is not set: a notebook never runs without its token")
    jupyter = {name: value for name, value in env.items() if name != "DET_TASK_TOKEN"}
    jupyter["JUPYTER_TOKEN"] = token
    return jupyter


def assets_environment(jupyterlab_init: str, prefix: str) -> dict[str, str]:
    """Where JupyterLab's assets are (JUPYTERLAB_DIR, JUPYTER_PATH) when this
    interpreter's prefix is not the environment it was installed in: an
    agent's trial venv adds the agent's packages, not its `share/jupyter`.
    `jupyterlab_init`: <environment>/lib/pythonX.Y/site-packages/jupyterlab/__init__.py."""
    installed = Path(jupyterlab_init).parents[4]
    data = installed / "share" / "jupyter"
    if installed == Path(prefix) or not (data / "lab").is_dir():
        return {}
    return {"JUPYTERLAB_DIR": str(data / "lab"), "JUPYTER_PATH": str(data)}


def main() -> int:
    try:
        spec = importlib.util.find_spec("jupyterlab")
        if spec is None or spec.origin is None:
            raise NotebookError(
                f"JupyterLab is not installed for {sys.executable} (pip install jupyterlab; with the "
                "Docker runtime, use an image that has it)"
            )
        argv = jupyter_argv(dict(os.environ), os.getcwd())
        env = {**assets_environment(spec.origin, sys.prefix), **jupyter_environment(dict(os.environ))}
    except NotebookError as error:
        print(f"{PROG}: {error}", file=sys.stderr)
        return 1
    os.execve(sys.executable, argv, env)  # signals reach JupyterLab itself


if __name__ == "__main__":
    sys.exit(main())
