"""A trial process rides out a nats-server outage: a real trial script (metrics, checkpoints,
status, progress) reports through a real gateway while its nats-server is killed for longer
than the gateway's append timeout and started again on the same store. The gateway answers
UNAVAILABLE meanwhile (it answered UNKNOWN before, and the trial exited 1); the trial keeps its
reports, waits, delivers them once in order, logs the outage once and exits 0."""

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gateway import SECRET, given_trial, stored

from deploy.local.servers import NatsServer, free_port
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

# Longer than the gateway's append timeout (connection.REQUEST_TIMEOUT_S, 10 s): appends fail.
OUTAGE_S = 12.0
STEPS = 40

TRAIN_PY = textwrap.dedent(
    f"""
    import logging
    import determined as det

    logging.basicConfig(level=logging.WARNING, format=det.LOG_FORMAT)
    with det.core.init() as core_context:
        for step in range(1, {STEPS} + 1):
            core_context.train.report_training_metrics(steps_completed=step, metrics={{"loss": 1.0 / step}})
            if step % 10 == 0:
                with core_context.checkpoint.store_path({{"steps_completed": step}}) as (path, _):
                    (path / "state").write_text(str(step))
                core_context.train.set_status(f"checkpointed {{step}}")
                core_context.train.report_progress(step / {STEPS})
                print("checkpointed", step, flush=True)
                input()  # the test says when to go on
    """
)


class Nats:
    """A nats-server of the test's own, to kill and start again on the same port and store."""

    def __init__(self, folder: Path) -> None:
        self._server = NatsServer(folder / "nats", free_port(), folder / "nats.log")
        self._process = self._server.start()
        self.url = self._server.url

    def kill(self) -> None:
        self._process.kill()
        self._process.wait()

    def start(self) -> None:
        self._process = self._server.start()


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Nats]:
    server = Nats(tmp_path)
    yield server
    server.kill()


async def test_a_trial_rides_out_a_nats_server_outage(
    nats: Nats, namespace: str, database_url: str, tmp_path: Path
) -> None:
    settings = GatewaySettings(
        nats_url=nats.url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        cluster_id="test-cluster",
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )
    gateway = await Gateway.start(settings)
    store = await EventStore.connect(nats.url, namespace)
    try:
        await given_trial(store, gateway)
        (tmp_path / "train.py").write_text(TRAIN_PY)
        trial = await asyncio.create_subprocess_exec(
            sys.executable,
            str(tmp_path / "train.py"),
            env=trial_env(gateway.port, tmp_path / "checkpoints"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert trial.stdin is not None and trial.stdout is not None
        output = [await asyncio.wait_for(trial.stdout.readline(), 60)]
        while not output[-1].startswith(b"checkpointed 10"):
            assert output[-1], b"".join(output).decode()  # the trial ended first
            output.append(await asyncio.wait_for(trial.stdout.readline(), 60))

        nats.kill()
        trial.stdin.write(b"\n" * 4)  # the trial goes on through the outage
        await asyncio.sleep(OUTAGE_S)
        nats.start()

        output.append(await asyncio.wait_for(trial.stdout.read(), 120))
        assert await trial.wait() == 0, b"".join(output).decode()
        log = b"".join(output).decode()
        assert log.count("reports: waiting for the gateway (UNAVAILABLE: the event log (nats-server)") == 1, (
            log
        )
        assert log.count("reports: the gateway answers again after") == 1, log

        steps = [
            r.steps_completed
            for e in await stored(store, "metrics")
            for r in e.trial_metrics_reported.reports
        ]
        assert steps == list(range(1, STEPS + 1))
        assert len(await stored(store, "checkpoint")) == STEPS // 10
        statuses = [
            e.trial_status_reported.status
            for e in await stored(store, "trial")
            if e.HasField("trial_status_reported")
        ]
        assert statuses == [f"checkpointed {step}" for step in range(10, STEPS + 1, 10)]
    finally:
        await store.close()
        await gateway.stop()


def trial_env(port: int, checkpoints: Path) -> dict[str, str]:
    """The environment the agent gives the trial of allocation 1.1 (`given_trial`)."""
    return {
        **os.environ,
        "DET_MASTER": f"127.0.0.1:{port}",
        "DET_CLUSTER_ID": "test-cluster",
        "DET_AGENT_ID": "a1",
        "DET_SLOT_IDS": "[0]",
        "DET_TASK_ID": "1",
        "DET_ALLOCATION_ID": "1.1",
        "DET_SESSION_TOKEN": mint_allocation_token(SECRET, 1, "1.1"),
        "DET_TASK_TYPE": "TRIAL",
        "DET_EXPERIMENT_ID": "1",
        "DET_TRIAL_ID": "1",
        "DET_TRIAL_RUN_ID": "1",
        "DET_TRIAL_SEED": "1",
        "DET_HPARAMS": "{}",
        "DET_EXPERIMENT_CONFIG": json.dumps(
            {"checkpoint_storage": {"type": "shared_fs", "host_path": str(checkpoints)}}
        ),
    }
