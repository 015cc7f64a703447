"""Helpers shared by the end-to-end tests: a local cluster started with the
real `det deploy local cluster-up`, and the `det` CLI run as a subprocess.
cluster-up logs the operator in as admin: every `det` of a Cluster acts as
admin, through the token cache in its own DET_CONFIG_DIR.
The session-scoped `cluster` fixture is in conftest.py; test_restarts.py
starts its own with `started_cluster`."""

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import grpc
from pydantic import SecretStr

from deploy.local.credentials import credentials
from deploy.local.servers import free_port
from deploy.local.trial_home import DEFAULT_TRIAL_USER
from determined._client import grpc_target, master_channel
from determined.cli._auth import TokenStore
from determined.cli._client import bearer
from determined.cli._output import message_dict
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.connection import Connection
from services.common.envelope import payload_of
from services.common.eventstore import EventStore
from services.common.settings import NatsCredentials
from support.ports import free_port_run

T = TypeVar("T")

# How much of each part's log a failed test's report (or a det that never ended) shows.
PART_LOG_LINES = 60
UP_TIMEOUT_S = 420


class Cluster:
    def __init__(self, data_dir: Path, up_args: Sequence[str] = ()) -> None:
        """`up_args`: more `cluster-up` flags (e.g. --checkpoint-storage FILE)."""
        self.data_dir = data_dir
        self.up_args = tuple(up_args)
        self.master_port = free_port_run(3)  # the HTTP API and web UI on the next port, tasks' pages after
        self.nats_port = free_port()
        self.postgres_port = free_port()
        self.cli_config = data_dir.with_name(f"{data_dir.name}-cli")
        self.env = {key: value for key, value in os.environ.items() if key not in ("DET_USER", "DET_PASS")}
        self.env.update(DET_MASTER=f"localhost:{self.master_port}", DET_CONFIG_DIR=str(self.cli_config))
        # The built-in users' password, as the last up() showed it ("" until then).
        self.password = ""

    def up(self) -> subprocess.CompletedProcess[str]:
        started = det(
            self.env,
            "deploy",
            "local",
            "cluster-up",
            "--data-dir",
            str(self.data_dir),
            "--no-gpu",
            "--cpu-slots",
            "2",
            "--master-port",
            str(self.master_port),
            "--nats-port",
            str(self.nats_port),
            "--postgres-port",
            str(self.postgres_port),
            *self.up_args,
            # Longer than cluster-up's own deadlines (the compose cluster's is 300 s), so that a
            # cluster that does not come up fails with cluster-up's words naming the part.
            timeout_s=UP_TIMEOUT_S,
        )
        self.password = shown_password(started.stdout) or self.password
        return started

    def down(self) -> subprocess.CompletedProcess[str]:
        return det(self.env, "deploy", "local", "cluster-down", "--data-dir", str(self.data_dir))

    def storage_folder(self, name: str) -> Path:
        """A new folder for shared_fs checkpoint storage that trials may write: not under a
        test's tmp_path (closed to other users), and the trial user's when trials run as one
        (deploy/local/trial_home.py). Removed with the cluster."""
        folder = storage_home(self.data_dir) / f"{name}-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(DEFAULT_TRIAL_USER)
            os.chown(folder, user.pw_uid, user.pw_gid)
        return folder

    def det(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        try:
            result = det(self.env, *args)
        except subprocess.TimeoutExpired as timed_out:
            raise AssertionError(self._hung(args, timed_out)) from None
        if check:
            assert result.returncode == 0, f"det {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.det(*args, "--json").stdout)

    def _hung(self, args: Sequence[str], timed_out: subprocess.TimeoutExpired) -> str:
        """What a det that never ended printed, then what each part was doing meanwhile."""
        printed = [_text(timed_out.output), _text(timed_out.stderr)]
        return "\n".join(
            [f"det {' '.join(args)} did not end in {timed_out.timeout:.0f} s:", *printed, self.part_logs()]
        )

    def part_logs(self) -> str:
        """The end of each part's log (a failed test's report shows it: tests/conftest.py): what
        the cluster was doing, which is gone once the test's cluster is removed."""
        return "\n".join(
            f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-PART_LOG_LINES:])
            for log in sorted((self.data_dir / "logs").glob("*"))
            if log.is_file()
        )

    def explain(self, kind: str, key: object) -> tuple[list[tuple[int, str, str]], str]:
        """`det events explain`: (depth, type, reason) of each event of the chain, and the outcome."""
        answer = self.json("events", "explain", kind, str(key))
        chain = [
            (node.get("depth", 0), node["event"].get("type", ""), node["event"].get("reason", ""))
            for node in answer.get("chain", [])
        ]
        return chain, str(answer["outcome"])

    def create(self, context: Path, config_text: str) -> int:
        """Writes the config into the context folder and creates the experiment."""
        (context / "config.yaml").write_text(config_text)
        return created_id(self.det("experiment", "create", str(context / "config.yaml"), str(context)).stdout)

    # trials() and experiment_state() are what tests poll: they ask the gateway from this
    # process as det would, with the session det cached (a det process costs ~0.3 CPU-s), and
    # run det where that fails (no cached login, an outage det waits out). The JSON is det's:
    # message_dict of the same response, as `det experiment list-trials/describe --json`.

    def trials(self, experiment_id: int) -> list[dict[str, Any]]:
        request = api_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)
        response = self._ask("GetExperimentTrials", request)
        if response is None:
            return list(self.json("experiment", "list-trials", str(experiment_id)))
        return [message_dict(trial) for trial in response.trials]

    def experiment_state(self, experiment_id: int) -> str:
        response = self._ask("GetExperiment", api_pb2.GetExperimentRequest(experiment_id=experiment_id))
        if response is None:
            return str(self.json("experiment", "describe", str(experiment_id))["experiment"]["state"])
        return str(message_dict(response)["experiment"]["state"])

    def jobs(self, resource_pool: str = "") -> list[dict[str, Any]]:
        """The job queue (`det job list -p POOL --json`'s jobs), asked from the test process."""
        response = self._ask("GetJobs", api_pb2.GetJobsRequest(resource_pool=resource_pool))
        if response is None:
            pool = ["-p", resource_pool] if resource_pool else []
            return list(self.json("job", "list", *pool)["jobs"])
        return [message_dict(job) for job in response.jobs]

    def _ask(self, method: str, request: Any) -> Any:
        """The gateway's answer to one call as the user det acts as here; None when it fails."""
        master = self.env["DET_MASTER"]
        store = TokenStore(grpc_target(master), folder=self.cli_config)
        user = store.active_user()
        token = store.token(user) if user else None
        if token is None:
            return None
        with master_channel(master, [], self.env) as channel:
            stub = api_pb2_grpc.DeterminedStub(channel)  # type: ignore[no-untyped-call]
            try:
                return getattr(stub, method)(request, metadata=bearer(token), timeout=30)
            except grpc.RpcError:
                return None

    def logs(self, trial_id: int) -> str:
        return self.det("trial", "logs", str(trial_id)).stdout

    def query(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of the cluster's read models."""

        async def fetch() -> list[asyncpg.Record]:
            connection = await asyncpg.connect(self.superuser_url("determined"))
            try:
                return list(await connection.fetch(sql, *args))
            finally:
                await connection.close()

        return asyncio.run(fetch())

    def superuser_url(self, database: str) -> str:
        """The cluster's PostgreSQL as its superuser, with the password cluster-up made."""
        password = credentials(self.data_dir).postgres_password
        return f"postgresql://postgres:{password}@127.0.0.1:{self.postgres_port}/{database}"

    def nats_login(self, user: str) -> NatsCredentials:
        """One of the cluster's nats-server users (deploy/local/credentials.py)."""
        return NatsCredentials(user=user, password=SecretStr(credentials(self.data_dir).nats[user].password))

    def permission_violations(self) -> list[str]:
        """nats-server's log lines about a publish or subscription a user may not make."""
        lines = (self.data_dir / "logs" / "nats-server.log").read_text(errors="replace").splitlines()
        return [line for line in lines if "Violation" in line]

    def metric_events(self, trial_id: int) -> list[events_pb2.TrialMetricsReported]:
        """The trial's TrialMetricsReported events, read from the log itself."""

        async def read() -> list[events_pb2.TrialMetricsReported]:
            operator = self.nats_login("operator")
            connection = await Connection.open(f"nats://127.0.0.1:{self.nats_port}", "e2e", operator)
            store = EventStore(connection, "det")  # operator may read, not make streams
            try:
                payloads = [payload_of(s.envelope) async for s in store.read(["metrics"], follow=False)]
            finally:
                await store.close()
            return [
                p
                for p in payloads
                if isinstance(p, events_pb2.TrialMetricsReported) and p.trial_id == trial_id
            ]

        return asyncio.run(read())


@contextmanager
def started_cluster(prefix: str, up_args: Sequence[str] = (), attacker: str = "") -> Iterator[Cluster]:
    """A cluster up for the block, then down and its data folder removed. At the end nats-server
    must have refused nothing, but the `attacker` NATS user's tries (a test's own)."""
    # Not under the home folder: PostgreSQL runs as its own user and must reach it.
    data_dir = Path("/tmp") / f"{prefix}-{uuid.uuid4().hex[:8]}"
    running = Cluster(data_dir, up_args)
    started = running.up()
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield running
        refused = [
            line
            for line in running.permission_violations()
            if not attacker or f'/user:{attacker}"' not in line
        ]
        assert not refused, "nats-server refused a part of the cluster:\n" + "\n".join(refused)
    finally:
        running.down()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(storage_home(data_dir), ignore_errors=True)
        shutil.rmtree(running.cli_config, ignore_errors=True)


def storage_home(data_dir: Path) -> Path:
    # In the data folder's tree: a process trial's private /tmp still shows that tree.
    return data_dir / "test-storage"


def det(
    env: dict[str, str], *args: str, stdin: str = "", timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """`stdin`: what det reads (passwords, one a line); nothing else reaches it."""
    command = [sys.executable, "-m", "determined.cli", *args]
    return subprocess.run(
        command, check=False, env=env, input=stdin, capture_output=True, text=True, timeout=timeout_s
    )


def shown_password(output: str) -> str:
    """The generated password cluster-up shows once ("" when it showed none)."""
    marker = "admin and determined have the password: "
    line = next((line for line in output.splitlines() if line.startswith(marker)), "")
    return line[len(marker) :].split(" ", 1)[0]


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def wait_for(condition: Callable[[], T], what: str, deadline_s: float = 60.0) -> T:
    """Polls `condition` until it returns something truthy, which it returns."""
    end = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s:.0f} s waiting for {what}")
        time.sleep(0.1)


def created_id(output: str) -> int:
    line = next(line for line in output.splitlines() if line.startswith("Created experiment "))
    return int(line.split()[-1])
