"""services/agent/containers/bundle.py: the harness packages a container
gets, and the shell that puts them on PYTHONPATH only where the image needs
them (run here with a stand-in `python3` on PATH, as an image would have)."""

import os
import subprocess
import sys
from pathlib import Path

from services.agent.containers.bundle import ENTER_SCRIPT, HARNESS_PATH, NOT_MOUNTED, harness_packages

# The entrypoint: says what PYTHONPATH it got.
PRINT_PYTHONPATH = ["/bin/sh", "-c", 'echo "PYTHONPATH=${PYTHONPATH:-}"']


def enter(
    tmp_path: Path, python_says: str | None, *, pythonpath: str = ""
) -> subprocess.CompletedProcess[str]:
    """ENTER_SCRIPT with a python3 that answers `python_says` (None: no python3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if python_says is not None:
        (bin_dir / "python3").write_text(f"#!/bin/sh\necho '{python_says}'\n")
        (bin_dir / "python3").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin" if python_says is not None else str(bin_dir) + ":/nonexistent",
        "DET_HARNESS_PATH": HARNESS_PATH,
        "DET_HARNESS_PYTHON": "3.11",
        "DET_FATAL_ERROR_FILE": str(tmp_path / "fatal"),
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        ["/bin/sh", "-c", ENTER_SCRIPT, "det-enter", *PRINT_PYTHONPATH],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_an_image_with_determined_keeps_its_own(tmp_path: Path) -> None:
    run = enter(tmp_path, "3.12 True")
    assert (run.returncode, run.stdout) == (0, "PYTHONPATH=\n")


def test_an_image_of_the_same_python_without_it_gets_the_bundle_first(tmp_path: Path) -> None:
    assert enter(tmp_path, "3.11 False").stdout == f"PYTHONPATH={HARNESS_PATH}\n"
    assert enter(tmp_path, "3.11 False", pythonpath="/mine").stdout == f"PYTHONPATH={HARNESS_PATH}:/mine\n"


def test_another_python_without_it_fails_at_once_saying_why(tmp_path: Path) -> None:
    run = enter(tmp_path, "3.9 False")
    assert run.returncode == 1 and run.stdout == ""
    assert "the image's python3 is 3.9 and cannot import determined" in run.stderr
    assert "Python 3.11" in (tmp_path / "fatal").read_text()  # a restart cannot help


def test_an_image_without_python_runs_the_entrypoint_as_it_is(tmp_path: Path) -> None:
    run = enter(tmp_path, None)
    assert (run.returncode, run.stdout) == (0, "PYTHONPATH=\n")


def test_the_agents_harness_packages_are_found() -> None:
    bundle = harness_packages(sys.executable)
    assert bundle.version == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert {"determined", "grpc", "google", "yaml"} <= set(bundle.packages)
    targets = {os.path.basename(m.container_path): m for m in bundle.mounts}
    assert all(m.read_only and m.container_path.startswith(HARNESS_PATH + "/") for m in bundle.mounts)
    assert os.path.isdir(targets["determined"].host_path) and not NOT_MOUNTED & set(targets)
    assert bundle.wrap(["python3", "x.py"])[-2:] == ["python3", "x.py"]
    assert set(bundle.variables) == {"DET_HARNESS_PATH", "DET_HARNESS_PYTHON"}
