"""A throwaway local cluster for the benchmarks: `det deploy local cluster-up`
in a temporary folder on free ports, stopped and removed afterwards."""

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from deploy.local.servers import free_port


@dataclass(frozen=True)
class BenchCluster:
    env: dict[str, str]
    postgres_port: int

    @property
    def database_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.postgres_port}/determined"


def det(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "determined.cli", *args], env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"det {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def created_experiment_id(output: str) -> int:
    return int(output.strip().splitlines()[-1].split()[-1])


@contextmanager
def local_cluster() -> Iterator[BenchCluster]:
    data_dir = Path("/tmp") / f"det-bench-{uuid.uuid4().hex[:8]}"
    master_port, postgres_port = free_port(), free_port()
    env = dict(os.environ, DET_MASTER=f"localhost:{master_port}")
    det(env, "deploy", "local", "cluster-up", "--data-dir", str(data_dir), "--no-gpu",
        "--master-port", str(master_port), "--nats-port", str(free_port()),
        "--postgres-port", str(postgres_port))
    try:
        yield BenchCluster(env, postgres_port)
    finally:
        det(env, "deploy", "local", "cluster-down", "--data-dir", str(data_dir))
        shutil.rmtree(data_dir, ignore_errors=True)
