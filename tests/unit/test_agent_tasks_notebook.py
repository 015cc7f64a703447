"""`determined.exec.notebook`: JupyterLab's command line and environment from
the task contract (nothing is started)."""

import sys
from pathlib import Path

import pytest

from determined.exec.notebook import NotebookError, assets_environment, jupyter_argv, jupyter_environment

CONTRACT = {"DET_TASK_HOST": "10.0.0.7", "DET_TASK_PORT": "4000", "DET_PROXY_PREFIX": "/proxy/t1/"}


def test_jupyterlab_serves_on_the_contracts_address_and_prefix() -> None:
    argv = jupyter_argv(CONTRACT, "/work/t1.1/trial")
    assert argv[:3] == [sys.executable, "-m", "jupyterlab"]
    for flag in (
        "--ServerApp.ip=10.0.0.7",
        "--ServerApp.port=4000",
        "--ServerApp.port_retries=0",
        "--ServerApp.base_url=/proxy/t1/",
        "--ServerApp.root_dir=/work/t1.1/trial",
        "--ServerApp.open_browser=False",
    ):
        assert flag in argv


def test_the_token_never_is_on_the_command_line() -> None:
    env = {**CONTRACT, "DET_TASK_TOKEN": "t0k"}
    assert not any("t0k" in word for word in jupyter_argv(env, "/w"))
    jupyter = jupyter_environment(env)
    assert jupyter["JUPYTER_TOKEN"] == "t0k" and "DET_TASK_TOKEN" not in jupyter


def test_it_never_runs_without_its_token_or_address() -> None:
    with pytest.raises(NotebookError, match="DET_TASK_TOKEN"):
        jupyter_environment(dict(CONTRACT))
    with pytest.raises(NotebookError, match="DET_TASK_PORT"):
        jupyter_argv({"DET_TASK_HOST": "h", "DET_PROXY_PREFIX": "/"}, "/w")


def test_from_a_trial_venv_jupyterlab_finds_its_assets_where_it_was_installed(tmp_path: Path) -> None:
    agent = tmp_path / "agent-venv"
    init = agent / "lib" / "python3.11" / "site-packages" / "jupyterlab" / "__init__.py"
    (agent / "share" / "jupyter" / "lab").mkdir(parents=True)
    assert assets_environment(str(init), str(tmp_path / "trial-venv")) == {
        "JUPYTERLAB_DIR": str(agent / "share" / "jupyter" / "lab"),
        "JUPYTER_PATH": str(agent / "share" / "jupyter"),
    }
    assert assets_environment(str(init), str(agent)) == {}  # its own environment: nothing to say
    bare = tmp_path / "bare" / "lib" / "python3.11" / "site-packages" / "jupyterlab" / "__init__.py"
    assert assets_environment(str(bare), str(tmp_path / "trial-venv")) == {}  # no assets there either
