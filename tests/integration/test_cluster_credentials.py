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
from deploy.local.credentials import (
    CREDENTIALS_FILE,
    Credentials,
    agent_user,
    authorization_config,
    credentials,
    without_agent,
)
from deploy.local.parts import _database_ready
from deploy.local.servers import NatsServer, PostgresServer, free_port
from determined.proto import events_pb2
from services.common.connection import Connection, NatsLoginRefusedError
from services.common.envelope import Append, aggregate
from services.common.eventstore import EventStore, StreamLimits
from services.common.job_queue import KvJobQueueBoard, PublishedQueue
from services.common.settings import NatsCredentials, inbox_prefix

# One of the guarded server's agents (a1, a2), each its own user.
AGENT = agent_user("a1")


@dataclass
class GuardedNats:
    url: str
    credentials: Credentials

    async def client(self, user: str, errors: list[Exception] | None = None) -> NatsClient:
        async def keep(error: Exception) -> None:
            if errors is not None:
                errors.append(error)

        password = self.credentials.nats[user].password
        return await nats.connect(
            self.url,
            user=user,
            password=password,
            inbox_prefix=inbox_prefix(user),
            allow_reconnect=False,
            error_cb=keep,
        )

    async def store(self, user: str, monkeypatch: pytest.MonkeyPatch) -> EventStore:
        """An event store logged in as `user` through its settings, as the part would."""
        monkeypatch.setenv("DET_NATS_USER", user)
        monkeypatch.setenv("DET_NATS_PASSWORD", self.credentials.nats[user].password)
        return await asyncio.wait_for(EventStore.connect(self.url, "det", name=user), 10)


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    found = credentials(tmp_path, ["a1", "a2"])
    server = NatsServer(
        tmp_path / "nats", free_port(), tmp_path / "nats.log", authorization=authorization_config(found.nats)
    )
    process = server.start()
    yield server
    process.terminate()
    process.wait(10)


@pytest.fixture
def guarded_nats(nats_server: NatsServer, tmp_path: Path) -> GuardedNats:
    return GuardedNats(nats_server.url, credentials(tmp_path))


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
    old_shared_user = {"user": "agent", "password": guarded_nats.credentials.nats[AGENT].password}
    for login in ({}, {"user": AGENT, "password": "wrong"}, old_shared_user):
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(guarded_nats.url, allow_reconnect=False, **login)
    config = tmp_path / "nats" / "nats-server.conf"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert guarded_nats.credentials.nats[AGENT].password not in config.read_text()


async def test_a_part_whose_login_is_refused_ends_saying_why(guarded_nats: GuardedNats) -> None:
    wrong = NatsCredentials(user="agent", password=SecretStr("wrong"))
    with pytest.raises(
        NatsLoginRefusedError, match="user 'agent'.*DET_NATS_PASSWORD.*credentials.json"
    ) as ended:
        async with asyncio.timeout(10):
            await Connection.open(guarded_nats.url, "agent", wrong)
    assert ended.value.code == str(ended.value)  # printed on exit, with status 1


async def test_a_closed_port_is_still_waited_for() -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(Connection.open(f"nats://127.0.0.1:{free_port()}", "agent"), 2)


@pytest.mark.parametrize("user", ["scheduler", "searcher", "checkpoint", AGENT])
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


async def test_an_agent_appends_its_own_agent_events_and_logs_but_no_other_agents_or_experiment_event(
    streams: EventStore, guarded_nats: GuardedNats
) -> None:
    errors: list[Exception] = []
    agent = await guarded_nats.client(AGENT, errors)
    try:
        js = agent.jetstream(timeout=2)
        assert (await js.publish("det.events.agent.a1", b"registered")).seq == 1
        assert (await js.publish("det.logs.trial.1", b"line")).seq == 1
        for forged in (
            "det.events.agent.a2",
            "det.events.experiment.1",
            "det.events.user.1",
            "$JS.API.STREAM.PURGE.EVENTS",
        ):
            with pytest.raises(nats.errors.TimeoutError):
                await js.publish(forged, b"forged")
    finally:
        await agent.close()
    assert await streams.last_sequence() == 1
    assert any("permissions violation" in str(error).lower() for error in errors)


async def test_the_agent_cannot_read_the_answers_another_part_gets(guarded_nats: GuardedNats) -> None:
    errors: list[Exception] = []
    agent = await guarded_nats.client(AGENT, errors)
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
    agent = await guarded_nats.client(AGENT, errors)
    try:
        beats = await scheduler.subscribe("det.heartbeats.>")
        await searcher.subscribe("det.heartbeats.>")
        await scheduler.flush()
        await searcher.flush()
        await agent.publish("det.heartbeats.a2", b"{}")  # another agent's: refused
        await agent.publish("det.heartbeats.a1", b"{}")
        assert (await beats.next_msg(timeout=5)).subject == "det.heartbeats.a1"
        await asyncio.sleep(0.2)
    finally:
        for client in (scheduler, searcher, agent):
            await client.close()
    assert any("subscription" in str(error).lower() for error in errors)
    assert any('publish to "det.heartbeats.a2"' in str(error) for error in errors)


async def test_the_scheduler_alone_writes_the_job_queue_and_the_gateway_reads_it(
    streams: EventStore, guarded_nats: GuardedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    published = PublishedQueue(sequence=3, kinds=("agent",))
    scheduler = await guarded_nats.store("scheduler", monkeypatch)
    try:
        await KvJobQueueBoard(scheduler).publish(published)
    finally:
        await scheduler.close()
    assert await KvJobQueueBoard(streams).read() == published
    errors: list[Exception] = []
    searcher = await guarded_nats.client("searcher", errors)
    try:
        with pytest.raises(nats.errors.TimeoutError):
            await searcher.jetstream(timeout=2).publish("$KV.job_queue.queue", b"forged")
    finally:
        await searcher.close()
    assert await KvJobQueueBoard(streams).read() == published
    assert any('publish to "$kv.job_queue.queue"' in str(error).lower() for error in errors), errors


async def test_the_operator_reads_the_log_and_appends_nothing(
    streams: EventStore, guarded_nats: GuardedNats
) -> None:
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


async def test_the_eventlog_tool_logs_in_as_operator_and_prints_no_password_hash(
    streams: EventStore, guarded_nats: GuardedNats, tmp_path: Path
) -> None:
    hashed = "$2b$12$" + "h" * 53
    created = events_pb2.UserCreated(user_id=7, username="mallory", active=True, password_hash=hashed)
    await streams.append(Append(aggregate("user", 7), created, msg_id="u7"), actor="test")
    await streams.append(event("experiment", 1), actor="test")
    command = [
        sys.executable,
        "-m",
        "services.eventlog",
        "--nats-url",
        guarded_nats.url,
        "--credentials",
        str(tmp_path / CREDENTIALS_FILE),
    ]
    environment = {key: value for key, value in os.environ.items() if not key.startswith("DET_NATS_")}
    printed = await asyncio.to_thread(
        subprocess.run, command, env=environment, capture_output=True, text=True, timeout=60, check=True
    )
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [line["event_id"] for line in lines] == ["u7", "experiment-1"]
    assert lines[0]["user_created"]["password_hash"] == "(redacted)"
    assert hashed not in printed.stdout + printed.stderr


# -- what each part reads ---------------------------------------------------------------


def event(kind: str, number: int) -> Append:
    """A well-formed event of `kind`, one aggregate per number."""
    payloads = {
        "agent": events_pb2.AgentEnabled(agent_id=f"a{number}"),
        "allocation": events_pb2.AllocationStopRequested(allocation_id=f"x{number}"),
        "experiment": events_pb2.ExperimentKillRequested(experiment_id=number),
        "user": events_pb2.UserSessionRevoked(user_id=number, session_id="s"),
    }
    payload = payloads[kind]
    name = {"agent": f"a{number}", "allocation": f"x{number}"}.get(kind, str(number))
    return Append(aggregate(kind, name), payload, msg_id=f"{kind}-{number}")


SCHEDULER_KINDS = ["agent", "allocation", "experiment"]
# Interleaved, with user events (which the scheduler must not read) between.
MIXED = ["user", "agent", "experiment", "user", "allocation", "allocation", "experiment", "agent", "user"]


async def append_mixed(gateway: EventStore, start: int) -> list[tuple[int, str]]:
    """Appends MIXED; the (sequence, kind) of what the scheduler reads."""
    appended = []
    for number, kind in enumerate(MIXED, start):
        sequence, _ = await gateway.append(event(kind, number), actor="test")
        appended.append((sequence, kind))
    return [(sequence, kind) for sequence, kind in appended if kind != "user"]


async def test_a_part_reads_the_kinds_it_folds_in_stream_order_replayed_and_followed(
    streams: EventStore, guarded_nats: GuardedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = await append_mixed(streams, 1)
    scheduler = await guarded_nats.store("scheduler", monkeypatch)
    try:
        replayed = [
            (e.sequence, e.envelope.aggregate.split("/")[0])
            async for e in scheduler.read(SCHEDULER_KINDS, follow=False)
        ]
        assert replayed == stored
        assert await scheduler.last_sequence_of(SCHEDULER_KINDS) == stored[-1][0]
        assert (await scheduler.last_event("agent/a8")) is not None
        read = scheduler.read(SCHEDULER_KINDS, start_sequence=stored[-1][0] + 1)
        first = asyncio.ensure_future(anext(read))
        followed_stored = await append_mixed(streams, 100)
        followed = [await first] + [await anext(read) for _ in followed_stored[1:]]
        assert [(e.sequence, e.envelope.aggregate.split("/")[0]) for e in followed] == followed_stored
        await read.aclose()
    finally:
        await scheduler.close()


async def test_a_part_is_refused_every_way_of_reading_events_it_does_not_fold(
    streams: EventStore, guarded_nats: GuardedNats
) -> None:
    await streams.append(event("user", 1), actor="test")
    await streams.append(event("experiment", 2), actor="test")
    await streams.append(event("agent", 3), actor="test")
    for user, refused, allowed in (
        ("scheduler", "det.events.user.>", "det.events.experiment.2"),
        (AGENT, "det.events.experiment.>", "det.events.agent.a3"),
    ):
        errors: list[Exception] = []
        client = await guarded_nats.client(user, errors)
        try:
            js = client.jetstream(timeout=1)
            attempts = (
                js.add_consumer(
                    "EVENTS", name="c1", filter_subject=refused
                ),  # the API subject names the filter
                js.add_consumer("EVENTS", filter_subject=refused),  # one that does not
                js.add_consumer("EVENTS", name="c2", filter_subjects=["det.events.agent.>", refused]),
                js.get_last_msg("EVENTS", refused),
                js.get_last_msg("EVENTS", refused, direct=True),
                js.get_msg("EVENTS", seq=1),
            )
            for attempt in attempts:
                with pytest.raises(nats.errors.TimeoutError):
                    await attempt
            assert (await js.get_last_msg("EVENTS", allowed, direct=True)).subject == allowed
        finally:
            await client.close()
        assert sum("permissions violation" in str(error).lower() for error in errors) == len(attempts), user


async def test_an_agent_added_to_a_running_server_is_let_in_and_nobody_is_cut_off(
    nats_server: NatsServer, guarded_nats: GuardedNats, tmp_path: Path
) -> None:
    gateway = await guarded_nats.client("gateway")
    try:
        found = credentials(tmp_path, ["a3"])
        new = found.nats[agent_user("a3")]
        assert not nats_server.accepts_login(new.name, new.password)
        nats_server.authorization = authorization_config(found.nats)
        assert nats_server.reload(new.name, new.password)
        added = await GuardedNats(nats_server.url, found).client(new.name)
        await added.close()
        await gateway.flush(timeout=5)
        assert gateway.is_connected and gateway.stats["reconnects"] == 0
    finally:
        await gateway.close()


async def test_a_part_reads_an_older_log_once_the_gateway_allows_direct_gets(
    nats_server: NatsServer, guarded_nats: GuardedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Streams made by an earlier version serve no direct get, the only single-event get a
    part may make: it waits (as for an outage) until the gateway's start turns them on."""
    gateway = await guarded_nats.client("gateway")
    try:
        js = gateway.jetstream(timeout=5)
        await js.add_stream(name="EVENTS", subjects=["det.events.>"])  # as an earlier version made it
        await js.publish("det.events.experiment.1", b"old")
    finally:
        await gateway.close()
    scheduler = await guarded_nats.store("scheduler", monkeypatch)
    try:
        newest = asyncio.ensure_future(scheduler.last_sequence_of(["experiment"]))
        await asyncio.sleep(0.5)
        assert not newest.done()
        monkeypatch.setenv("DET_NATS_USER", "gateway")
        monkeypatch.setenv("DET_NATS_PASSWORD", guarded_nats.credentials.nats["gateway"].password)
        upgrading = await EventStore.connect(guarded_nats.url, "det", name="gateway", limits=StreamLimits())
        await upgrading.close()
        assert await asyncio.wait_for(newest, 10) == 1
    finally:
        await scheduler.close()


async def test_a_revoked_agent_is_cut_off_and_cannot_log_in_again(
    nats_server: NatsServer, guarded_nats: GuardedNats, tmp_path: Path
) -> None:
    errors: list[Exception] = []
    revoked = await guarded_nats.client(agent_user("a2"), errors)
    staying = await guarded_nats.client(AGENT)
    try:
        user = without_agent(tmp_path, "a2")
        assert user is not None and user.name not in credentials(tmp_path).nats
        nats_server.authorization = authorization_config(credentials(tmp_path).nats)
        assert nats_server.reload(user.name, user.password, let_in=False)
        async with asyncio.timeout(10):
            while revoked.is_connected:
                await asyncio.sleep(0.05)
        await staying.flush(timeout=5)
        assert staying.is_connected
        assert without_agent(tmp_path, "a2") is None
    finally:
        await revoked.close()
        await staying.close()


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
        assert (
            await gateway.fetchval(
                "SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user"
            )
            is False
        )
        assert (
            await gateway.fetchval(
                "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", DATABASE
            )
            == "gateway"
        )
        await gateway.execute(
            "CREATE SCHEMA read_model; CREATE TABLE read_model.t (x int); DROP SCHEMA read_model CASCADE"
        )
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


async def test_a_folder_made_with_trust_is_guarded_at_its_next_start(
    postgres_folder: Path, tmp_path: Path
) -> None:
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
        await assert_guarded(
            server, found
        )  # the superuser's read models were dropped for the gateway to rebuild
    finally:
        server.stop()
