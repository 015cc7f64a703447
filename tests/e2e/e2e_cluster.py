"""Helpers shared by the end-to-end tests: a local cluster started with the
real `det deploy local cluster-up`, and the `det` CLI run as a subprocess.
The session-scoped `cluster` fixture is in conftest.py."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deploy.local.servers import free_port


class Cluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.master_port = free_port()
        self.nats_port = free_port()
        self.postgres_port = free_port()
        self.env = dict(os.environ, DET_MASTER=f"localhost:{self.master_port}")

    def up(self) -> subprocess.CompletedProcess[str]:
        return det(
            self.env, "deploy", "local", "cluster-up", "--data-dir", str(self.data_dir), "--no-gpu",
            "--cpu-slots", "2", "--master-port", str(self.master_port),
            "--nats-port", str(self.nats_port), "--postgres-port", str(self.postgres_port),
        )

    def down(self) -> subprocess.CompletedProcess[str]:
        return det(self.env, "deploy", "local", "cluster-down", "--data-dir", str(self.data_dir))

    def det(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = det(self.env, *args)
        if check:
            assert result.returncode == 0, f"det {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.det(*args, "--json").stdout)


def det(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "determined.cli", *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=300)


def wait_for(condition: Any, what: str, deadline_s: float = 60.0) -> Any:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def created_id(output: str) -> int:
    line = next(line for line in output.splitlines() if line.startswith("Created experiment "))
    return int(line.split()[-1])
