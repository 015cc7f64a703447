"""A log to take away: `det events export` from a cluster, then `det deploy local replay` of the
bundle shows the same experiment list and experiment pages (CLI and HTTP) as the cluster it came
from, and appends nothing, reads and logins included. The source is a gateway over a recorded
log; the replay is the one cluster this module starts."""

import asyncio
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.e2e_cluster import det
from support.golden_log import GOLDEN
from support.ports import free_port_run
from support.security_gateway import PASSWORD, gateway_settings

from deploy.local.cluster import ClusterRecord
from deploy.local.replay_gateway import load
from services.common.connection import Connection
from services.common.eventstore import EventStore
from services.eventlog.__main__ import operator_login
from services.gateway.server import Gateway

EXPERIMENTS = (1, 2, 3)


@pytest.fixture
async def source(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    """A gateway over three_experiments.jsonl; it made the users admin and determined."""
    store = await EventStore.connect(nats_url, namespace)
    try:
        await load(store, GOLDEN / "three_experiments.jsonl")
    finally:
        await store.close()
    started = await Gateway.start(gateway_settings(nats_url, namespace, database_url, "replay-source"))
    assert await started.projector.catch_up(timeout_s=30.0)
    yield started
    await started.stop()


@pytest.fixture
def replay_dir(tmp_path: Path) -> Iterator[Path]:
    data_dir = tmp_path / "replay"
    yield data_dir
    det(dict(os.environ), "deploy", "local", "cluster-down", "--data-dir", str(data_dir))


def cli(master: str, config: Path, *args: str, user: str = "") -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key not in ("DET_USER", "DET_PASS")}
    environment.update(DET_MASTER=master, DET_CONFIG_DIR=str(config))
    if user:
        environment.update(DET_USER=user, DET_PASS=PASSWORD)
    result = det(environment, *args)
    assert result.returncode == 0, f"det {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


async def pages(http_port: int, token: str) -> list[Any]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as client:
        headers = {"authorization": f"Bearer {token}"}
        answers = [await client.get(f"/api/v1/experiments/{n}", headers=headers) for n in EXPERIMENTS]
    return [answer.json() for answer in answers]


async def last_sequence(data_dir: Path) -> int:
    record = ClusterRecord.load(data_dir)
    assert record is not None
    connection = await Connection.open(
        f"nats://127.0.0.1:{record.nats_port}", "test", operator_login(data_dir / "credentials.json")
    )
    store = EventStore(connection)
    try:
        return await store.last_sequence()
    finally:
        await store.close()


async def test_a_replay_shows_the_cluster_it_came_from_and_appends_nothing(
    source: Gateway, replay_dir: Path, tmp_path: Path
) -> None:
    here, config, bundle = f"localhost:{source.port}", tmp_path / "cli", tmp_path / "bundle.jsonl"

    def reads(master: str, user: str = "") -> list[str]:
        commands = [("experiment", "list"), *(("experiment", "describe", str(n)) for n in EXPERIMENTS)]
        return [cli(master, config, *command, user=user).stdout for command in commands]

    exported = await asyncio.to_thread(cli, here, config, "events", "export", user="admin")
    bundle.write_text(exported.stdout)
    header, *events = [json.loads(line) for line in exported.stdout.splitlines()]
    assert (header["determined_es_bundle"], header["cluster_id"]) == (1, "replay-source")
    assert "(redacted)" in exported.stdout and "$2b$" not in exported.stdout  # no bcrypt hash
    one = await asyncio.to_thread(cli, here, config, "events", "export", "--experiment", "1", user="admin")
    header_one, *events_one = [json.loads(line) for line in one.stdout.splitlines()]
    assert header_one["filter"] == {"experiment_id": "1"}
    expected = {"experiment/1", "trial/1", "allocation/1.1", "metrics/1", *checkpoints(events, 1)}
    assert {event["aggregate"] for event in events_one} == expected
    before = await asyncio.to_thread(reads, here, "admin")
    assert source.http is not None
    source_pages = await pages(source.http.port, await http_login(source.http.port, "admin", PASSWORD))

    port = free_port_run(3)  # the web UI's is the next, tasks' pages' the one after
    replay = f"localhost:{port}"
    up = ("deploy", "local", "replay", str(bundle), "--data-dir", str(replay_dir), "--port", str(port))
    started = await asyncio.to_thread(cli, replay, config, *up)
    password = started.stdout.split("with the password ", 1)[1].split(" ", 1)[0]
    assert await asyncio.to_thread(reads, replay) == before
    assert await pages(port + 1, await http_login(port + 1, "replay", password)) == source_pages
    environment = {**os.environ, "DET_MASTER": replay, "DET_CONFIG_DIR": str(config)}
    refused = await asyncio.to_thread(det, environment, "model", "create", "m")
    assert refused.returncode != 0
    assert f"this cluster replays {bundle.name}: it changes nothing" in refused.stderr
    assert await last_sequence(replay_dir) == len(events)


def checkpoints(events: list[dict[str, Any]], trial_id: int) -> set[str]:
    return {
        event["aggregate"]
        for event in events
        if event.get("checkpoint_reported", {}).get("trial_id") == str(trial_id)
    }


async def http_login(http_port: int, user: str, password: str) -> str:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as client:
        answer = await client.post("/api/v1/auth/login", json={"username": user, "password": password})
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])
