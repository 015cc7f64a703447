"""Determined 0.38.1's own client (its `det` and its SDK), unchanged, driven against a local
cluster's HTTP API: the compatibility tests of tests/compat.

Its package is also called `determined`, so it lives in a venv of its own: $DET038_VENV, else
`.ci/venvs/det038` (made by .ci/run), else /work/det038. Where none is found the tests skip,
saying so, but under CI (`CI` or DET038_VENV set: .ci/run sets it) they fail: CI must run them.

In a test module: `from support.determined_client import determined_cluster  # noqa: F401`, then
`def test_x(determined_cluster: DeterminedCluster)`: one cluster per module, with
`determined_cluster.det("e", "list")` and `determined_cluster.sdk(script)` logged in as admin."""

import os
import shutil
import subprocess
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.e2e_cluster import Cluster, started_cluster

REPO = Path(__file__).resolve().parents[2]
FALLBACK_VENV = Path("/work/det038")
# Never waits longer: a hung command fails its test rather than CI.
TIMEOUT_S = 300


def determined_venv() -> Path | None:
    """The venv that holds Determined 0.38.1's client, or None where there is none."""
    chosen = os.environ.get("DET038_VENV")
    candidates = [Path(chosen)] if chosen else [REPO / ".ci" / "venvs" / "det038", FALLBACK_VENV]
    return next((venv for venv in candidates if (venv / "bin" / "det").exists()), None)


def required_venv() -> Path:
    """The venv, or the test skips (fails under CI) saying why."""
    venv = determined_venv()
    if venv is None:
        reason = "Determined 0.38.1's client is not installed: set DET038_VENV or run .ci/run"
        if os.environ.get("CI") or os.environ.get("DET038_VENV"):
            pytest.fail(reason)
        pytest.skip(reason)
    return venv


def client_env(
    master_url: str,
    config_dir: Path,
    user: str = "admin",
    password: str = "",
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of one of its commands: its master, its own token cache (nothing of ours
    leaks in: no PYTHONPATH, no DET_* of our CLI), and `user` logged in by DET_USER/DET_PASS
    (`user=""`: nobody, as a fresh shell)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("DET_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(DET_MASTER=master_url, DET_DEBUG_CONFIG_PATH=str(config_dir))
    if user:
        env.update(DET_USER=user, DET_PASS=password)
    env.update(extra or {})
    return env


def run_det(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Its `det ARGS`, in `cwd` (a folder of the test's: never the checkout, whose own
    `determined` must not shadow its)."""
    command = [str(required_venv() / "bin" / "det"), *args]
    return subprocess.run(
        command, env=dict(env), cwd=cwd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def run_sdk(script: str, env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A Python snippet run by its venv's Python (dedented: write it indented in the test)."""
    command = [str(required_venv() / "bin" / "python"), "-c", textwrap.dedent(script)]
    return subprocess.run(command, env=dict(env), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)


@dataclass
class DeterminedCluster:
    """A local cluster (ours) and Determined's client pointed at its HTTP API."""

    cluster: Cluster
    home: Path  # the client's working folder and token cache

    @property
    def master_url(self) -> str:
        return f"http://127.0.0.1:{self.cluster.master_port + 1}"

    def env(self, user: str = "admin", password: str | None = None, **extra: str) -> dict[str, str]:
        chosen = self.cluster.password if password is None else password
        return client_env(self.master_url, self.home / "config", user, chosen, extra)

    def det(self, *args: str, check: bool = True, user: str = "admin", stdin: str = "") -> str:
        """Its `det ARGS` as `user`: its stdout (`check`: it must exit 0)."""
        result = run_det(args, self.env(user), self.home, stdin)
        if check:
            assert result.returncode == 0, f"det {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def det_run(self, *args: str, user: str = "admin", stdin: str = "") -> subprocess.CompletedProcess[str]:
        """Its `det ARGS`, whatever its exit."""
        return run_det(args, self.env(user), self.home, stdin)

    def rest(self, path: str) -> Any:
        """GET `path` of its HTTP API as admin, in this process: for polling cheaply (each of its
        commands is a Python start of seconds on a busy machine)."""
        login = {"username": "admin", "password": self.cluster.password}
        with httpx.Client(base_url=self.master_url, timeout=60) as client:
            token = client.post("/api/v1/auth/login", json=login).json()["token"]
            answer = client.get(path, headers={"authorization": f"Bearer {token}"})
        answer.raise_for_status()
        return answer.json()

    def sdk(self, script: str, check: bool = True) -> str:
        """A snippet in its venv as admin (`check`: it must exit 0): its stdout."""
        result = run_sdk(script, self.env(), self.home)
        if check:
            assert result.returncode == 0, f"the script failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout


@pytest.fixture(scope="session")
def determined_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeterminedCluster]:
    """One local cluster for the session's compat tests (under xdist they all go to one worker:
    tests/conftest.py), and Determined's client for it."""
    required_venv()
    home = tmp_path_factory.mktemp("det038")
    try:
        with started_cluster("det-compat") as running:
            yield DeterminedCluster(running, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
