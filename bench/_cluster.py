"""A throwaway local cluster for the benchmarks: `det deploy local cluster-up`
in a temporary folder on free ports, stopped and removed afterwards (also when
the benchmark fails or is interrupted with Ctrl-C or SIGTERM)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.local.credentials import CREDENTIALS_FILE, credentials
from deploy.local.servers import free_port
from determined.common.states import TERMINAL_STATES


@dataclass(frozen=True)
class BenchCluster:
    env: dict[str, str]
    postgres_port: int
    data_dir: Path = Path()
    nats_port: int = 0

    @property
    def database_url(self) -> str:
        """The gateway's role, with the password cluster-up made (deploy/local/credentials.py)."""
        return credentials(self.data_dir).database_url(self.postgres_port, "determined")

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.nats_port}"

    def det(self, *args: str) -> str:
        return det(self.env, *args)

    def det_json(self, *args: str) -> Any:
        return json.loads(det(self.env, *args, "--json"))

    def stub(self) -> Any:
        """A gRPC stub on the gateway, to poll cheaply (one CLI process per poll
        would load the 2 cores the cluster runs on); its calls act as the operator
        cluster-up logged in."""
        from determined.cli._client import Gateway

        return Gateway(self.env["DET_MASTER"], environ=self.env).stub

    def events(self, *kinds: str) -> list[dict[str, Any]]:
        """The event log as `python -m services.eventlog` prints it (one dict an event)."""
        args = [
            sys.executable,
            "-m",
            "services.eventlog",
            "--nats-url",
            self.nats_url,
            "--credentials",
            str(self.data_dir / CREDENTIALS_FILE),
        ]
        for kind in kinds:
            args += ["--kind", kind]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]


def det(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "determined.cli", *args], env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"det {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def created_experiment_id(output: str) -> int:
    return int(output.strip().splitlines()[-1].split()[-1])


def wait_for_state(
    stub: Any,
    experiment_id: int,
    states: Collection[str] = TERMINAL_STATES,
    timeout: float = 1800.0,
    poll: float = 0.05,
) -> str:
    """Polls GetExperiment until the experiment is in one of `states`; returns it."""
    from determined.proto import api_pb2

    request = api_pb2.GetExperimentRequest(experiment_id=experiment_id)
    deadline = time.monotonic() + timeout
    while True:
        state = stub.GetExperiment(request).experiment.state
        if state in states:
            return str(state)
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id} still {state} after {timeout:.0f} s")
        time.sleep(poll)


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def local_cluster(
    cpu_slots: int | None = None, up_args: Sequence[str] = (), gpu: bool = False
) -> Iterator[BenchCluster]:
    """`up_args`: more `cluster-up` flags (e.g. --fork-trials); `gpu`: the agent offers this
    machine's GPUs (else CPU slots only)."""
    signal.signal(signal.SIGTERM, _raise_on_sigterm)  # so that `finally` stops the cluster
    data_dir = Path("/tmp") / f"det-bench-{uuid.uuid4().hex[:8]}"
    master_port, postgres_port, nats_port = free_port(), free_port(), free_port()
    env = dict(os.environ, DET_MASTER=f"localhost:{master_port}")
    up = [
        "deploy",
        "local",
        "cluster-up",
        "--data-dir",
        str(data_dir),
        "--no-gpu",
        "--master-port",
        str(master_port),
        "--nats-port",
        str(nats_port),
        "--postgres-port",
        str(postgres_port),
    ]
    if gpu:
        up.remove("--no-gpu")
    if cpu_slots is not None:
        up += ["--cpu-slots", str(cpu_slots)]
    up += up_args
    try:
        det(env, *up)
        yield BenchCluster(env, postgres_port, data_dir, nats_port)
    finally:
        try:
            det(env, "deploy", "local", "cluster-down", "--data-dir", str(data_dir))
        except SystemExit as error:  # do not hide why the benchmark itself failed
            print(f"# cluster-down: {error}", file=sys.stderr)
        finally:
            if os.environ.get("BENCH_KEEP_DATA"):
                print(f"# kept the cluster's data folder {data_dir}", file=sys.stderr)
            else:
                shutil.rmtree(data_dir, ignore_errors=True)
