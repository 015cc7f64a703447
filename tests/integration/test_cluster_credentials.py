"""A local cluster's nats-server and PostgreSQL let in their users only, each with
what it may do (deploy/local/credentials.py), against the real servers."""

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import nats
import nats.errors
import pytest
from nats.aio.client import Client as NatsClient
from pydantic import SecretStr

from deploy.local.cluster import DATABASE
from deploy.local.credentials import CREDENTIALS_FILE, Credentials, authorization_config, credentials
from deploy.local.parts import _database_ready
from deploy.local.servers import NatsServer, PostgresServer, free_port
from services.common.connection import Connection, NatsLoginRefusedError
from services.common.envelope import Envelope
from services.common.eventstore import EventStore
from services.common.settings import NatsCredentials


@dataclass
class GuardedNats:
    url: str
    credentials: Credentials

    async def client(self, user: str, errors: list[Exception] | None = None) -> NatsClient:
        async def keep(error: Exception) -> None:
            if errors is not None:
                errors.append(error)

        password = self.credentials.nats[user].password
        return await nats.connect(self.url, user=user, password=password, inbox_prefix=f"_INBOX.{user}",
                                  allow_reconnect=False, error_cb=keep)


@pytest.fixture
def guarded_nats(tmp_path: Path) -> Iterator[GuardedNats]:
    found = credentials(tmp_path)
    server = NatsServer(tmp_path / "nats", free_port(), tmp_path / "nats.log",
                        authorization=authorization_config(found.nats))
    process = server.start()
    yield GuardedNats(server.url, found)
    process.terminate()
    process.wait(10)


@pytest.fixture
async def streams(guarded_nats: GuardedNats, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[EventStore]:
    """The gateway's event store (the streams made), logged in through its settings."""
    monkeypatch.setenv("DET_NATS_USER", "gateway")
    monkeypatch.setenv("DET_NATS_PASSWORD", guarded_nats.credentials.nats["gateway"].password)
    store = await EventStore.connect(guarded_nats.url, "det", name="gateway")
    yield store
    await store.close()


async def test_a_connection_without_credentials_or_with_a_wrong_password_is_refused(
    guarded_nats: GuardedNats, tmp_path: Path
) -> None:
    for login in ({}, {"user": "agent", "password": "wrong"}):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(guarded_nats.url, allow_reconnect=False, **login)
    config = tmp_path / "nats" / "nats-server.conf"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert guarded_nats.credentials.nats["agent"].password not in config.read_text()


async def test_a_part_whose_login_is_refused_ends_saying_why(guarded_nats: GuardedNats) -> None:
    wrong = NatsCredentials(user="agent", password=SecretStr("wrong"))
    with pytest.raises(NatsLoginRefusedError, match="user 'agent'.*DET_NATS_PASSWORD.*credentials.json") as ended:
        async with asyncio.timeout(10):
            await Connection.open(guarded_nats.url, "agent", wrong)
    assert ended.value.code == str(ended.value)  # printed on exit, with status 1


async def test_a_closed_port_is_still_waited_for() -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(Connection.open(f"nats://127.0.0.1:{free_port()}", "agent"), 2)


@pytest.mark.parametrize("user", ["scheduler", "searcher", "checkpoint", "agent"])
async def test_each_part_finds_the_streams_through_its_settings(
    streams: EventStore, guarded_nats: GuardedNats, user: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DET_NATS_USER", user)
    monkeypatch.setenv("DET_NATS_PASSWORD", guarded_nats.credentials.nats[user].password)
    store = await asyncio.wait_for(EventStore.connect(guarded_nats.url, "det", name=user), 10)
    try:
        assert await store.last_sequence() == 0
    finally:
        await store.close()


async def test_the_agent_appends_agent_events_and_logs_but_no_experiment_event(
    streams: EventStore, guarded_nats: GuardedNats
) -> None:
    errors: list[Exception] = []
    agent = await guarded_nats.client("agent", errors)
    try:
        js = agent.jetstream(timeout=2)
        assert (await js.publish("det.events.agent.a1", b"registered")).seq == 1
        assert (await js.publish("det.logs.trial.1", b"line")).seq == 1
        for forged in ("det.events.experiment.1", "det.events.user.1", "$JS.API.STREAM.PURGE.EVENTS"):
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish(forged, b"forged")
    finally:
        await agent.close()
    assert await streams.last_sequence() == 1
    assert any("permissions violation" in str(error).lower() for error in errors)


async def test_the_agent_cannot_read_the_answers_another_part_gets(guarded_nats: GuardedNats) -> None:
    errors: list[Exception] = []
    agent = await guarded_nats.client("agent", errors)
    try:
        await agent.subscribe("_INBOX.gateway.>")
        await agent.subscribe("_INBOX.>")
        await agent.flush()
        await asyncio.sleep(0.2)  # the refusal comes back asynchronously
    finally:
        await agent.close()
    refused = [str(error) for error in errors if "subscription" in str(error).lower()]
    assert len(refused) == 2, errors


async def test_heartbeats_go_from_the_agents_to_the_scheduler_only(guarded_nats: GuardedNats) -> None:
    errors: list[Exception] = []
    scheduler = await guarded_nats.client("scheduler")
    searcher = await guarded_nats.client("searcher", errors)
    agent = await guarded_nats.client("agent")
    try:
        beats = await scheduler.subscribe("det.heartbeats.>")
        await searcher.subscribe("det.heartbeats.>")
        await scheduler.flush()
        await searcher.flush()
        await agent.publish("det.heartbeats.a1", b"{}")
        assert (await beats.next_msg(timeout=5)).subject == "det.heartbeats.a1"
        await asyncio.sleep(0.2)
    finally:
        for client in (scheduler, searcher, agent):
            await client.close()
    assert any("subscription" in str(error).lower() for error in errors)


async def test_the_operator_reads_the_log_and_appends_nothing(streams: EventStore, guarded_nats: GuardedNats) -> None:
    gateway = streams.nc.jetstream(timeout=5)
    await gateway.publish("det.events.experiment.1", b"created")
    operator = await guarded_nats.client("operator")
    try:
        js = operator.jetstream(timeout=2)
        assert (await js.get_last_msg("EVENTS", "det.events.experiment.1")).data == b"created"
        with pytest.raises(nats.errors.TimeoutError):
            await js.publish("det.events.experiment.1", b"forged")
    finally:
        await operator.close()


async def test_the_eventlog_tool_logs_in_as_operator(streams: EventStore, guarded_nats: GuardedNats,
                                                     tmp_path: Path) -> None:
    await streams.nc.jetstream(timeout=5).publish("det.events.experiment.1", Envelope(event_id="e1").SerializeToString())
    command = [sys.executable, "-m", "services.eventlog", "--nats-url", guarded_nats.url,
               "--credentials", str(tmp_path / CREDENTIALS_FILE)]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("DET_NATS_")}
    printed = await asyncio.to_thread(subprocess.run, command, env=environment, capture_output=True, text=True,
                                      timeout=60, check=True)
    assert [json.loads(line)["event_id"] for line in printed.stdout.splitlines()] == ["e1"]


# -- PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def postgres_folder() -> Iterator[Path]:
    """Under /tmp: as root, PostgreSQL runs as its own user, which must reach the folder."""
    folder = Path("/tmp") / f"hc-pg-{uuid.uuid4().hex[:8]}"
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def postgres_server(folder: Path, password: str = "") -> PostgresServer:
    return PostgresServer(folder / "data", free_port(), folder / "postgres.log", superuser_password=password)


async def assert_guarded(server: PostgresServer, found: Credentials) -> None:
    """Passwordless connections are refused; the gateway's role owns the database and is
    no superuser; the superuser logs in with its password."""
    for url in (server.url, server.url.replace("postgres@", "gateway@")):
        with pytest.raises((asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)):
            await asyncpg.connect(url)
    gateway = await asyncpg.connect(found.database_url(server.port, DATABASE))
    try:
        assert await gateway.fetchval("SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user") \
            is False
        assert await gateway.fetchval("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1",
                                      DATABASE) == "gateway"
        await gateway.execute("CREATE SCHEMA read_model; CREATE TABLE read_model.t (x int); DROP SCHEMA read_model CASCADE")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await gateway.execute("CREATE ROLE intruder SUPERUSER")
    finally:
        await gateway.close()
    superuser = await asyncpg.connect(server.url, password=found.postgres_password)
    await superuser.close()


async def test_a_new_cluster_database_asks_every_connection_for_a_password(
    postgres_folder: Path, tmp_path: Path
) -> None:
    found = credentials(tmp_path)
    server = postgres_server(postgres_folder, found.postgres_password)
    server.start()
    try:
        assert await asyncio.to_thread(_database_ready, server, found)
        await assert_guarded(server, found)
        assert await asyncio.to_thread(_database_ready, server, found)  # again: nothing changes
    finally:
        server.stop()
    assert found.postgres_password not in (postgres_folder / "postgres.log").read_text()


async def test_a_folder_made_with_trust_is_guarded_at_its_next_start(postgres_folder: Path, tmp_path: Path) -> None:
    old = postgres_server(postgres_folder)
    old.start()
    try:
        connection = await asyncpg.connect(old.url)
        await connection.execute(f'CREATE DATABASE "{DATABASE}"')
        await connection.close()
        connection = await asyncpg.connect(old.url.rsplit("/", 1)[0] + f"/{DATABASE}")
        await connection.execute("CREATE SCHEMA read_model; CREATE TABLE read_model.rows (x int)")
        await connection.close()
    finally:
        old.stop()
    found = credentials(tmp_path)
    server = postgres_server(postgres_folder, found.postgres_password)
    server.start()
    try:
        assert await asyncio.to_thread(_database_ready, server, found)
        await assert_guarded(server, found)  # the superuser's read models were dropped for the gateway to rebuild
    finally:
        server.stop()
