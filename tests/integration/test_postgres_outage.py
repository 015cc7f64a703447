"""The gateway while PostgreSQL is down: it stays up, queries answer
UNAVAILABLE ("read models unavailable"), appends that need no query go on,
and once PostgreSQL is back the projector goes on from its stored position;
a gateway started while it is down listens and becomes ready once it is back.

Each test runs its own PostgreSQL (the session's is shared), so that it can
stop and start it."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest
from support.pg_server import running_postgres

from deploy.local.servers import PostgresServer, free_port
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.errors import ReadModelsUnavailableError
from services.gateway.projector import _stopped
from services.gateway.read_models import POSTGRES_DOWN, SCHEMA, transaction
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

SECRET = "test-secret"
CONFIG = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters: {lr: 0.1}
"""
# Every call carries a deadline: a query that hung on the outage would fail
# with DEADLINE_EXCEEDED instead of UNAVAILABLE.
CALL_S = 10.0


@pytest.fixture
def postgres() -> Iterator[PostgresServer]:
    with running_postgres("det-test-pg-outage") as server:
        yield server


@pytest.fixture
async def own_database_url(postgres: PostgresServer, namespace: str) -> str:
    connection = await asyncpg.connect(postgres.url)
    try:
        await connection.execute(f'CREATE DATABASE "{namespace}"')
    finally:
        await connection.close()
    return postgres.url.rsplit("/", 1)[0] + f"/{namespace}"


def settings(nats_url: str, namespace: str, database_url: str) -> GatewaySettings:
    return GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )


@pytest.fixture
async def gateway(nats_url: str, namespace: str, own_database_url: str) -> AsyncIterator[Gateway]:
    started = await Gateway.start(settings(nats_url, namespace, own_database_url))
    yield started
    await started.stop()


async def until(condition: Callable[[], Awaitable[bool]], deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        assert time.monotonic() < end, "condition not met before the deadline"
        await asyncio.sleep(0.05)


async def refusal(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def create(api: api_pb2_grpc.DeterminedStub) -> int:
    request = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True)
    return int((await api.CreateExperiment(request, timeout=CALL_S)).experiment_id)


async def given_trial_run(store: EventStore, trial_id: int) -> tuple[tuple[str, str], ...]:
    """A trial of experiment 1 with its first run requested; the run's token."""
    created = events_pb2.TrialCreated(trial_id=trial_id, experiment_id=1)
    await store.append(Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:test")
    launch = events_pb2.TrialLaunch(experiment_id=1, trial_id=trial_id, trial_run_id=1)
    requested = events_pb2.AllocationRequested(
        allocation_id=f"{trial_id}.1", task_id=str(trial_id), trial=launch
    )
    await store.append(
        Append(f"allocation/{trial_id}.1", requested, f"requested-{trial_id}"), actor="service:test"
    )
    return (("x-allocation-token", mint_allocation_token(SECRET, trial_id, f"{trial_id}.1")),)


async def test_queries_are_refused_and_appends_go_on_while_postgres_is_down(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, postgres: PostgresServer, event_store: EventStore
) -> None:
    first = await create(api)
    token = await given_trial_run(event_store, trial_id=1)
    assert await gateway.projector.catch_up()

    postgres.stop()
    down = await refusal(api.GetExperiments(api_pb2.GetExperimentsRequest(), timeout=CALL_S))
    assert down.code() == grpc.StatusCode.UNAVAILABLE
    assert down.details() == "read models unavailable (PostgreSQL is down)"
    describe = await refusal(
        api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=first), timeout=CALL_S)
    )
    assert describe.code() == grpc.StatusCode.UNAVAILABLE
    # A report is fenced on the allocations table: refused for the harness to retry.
    report = api_pb2.ReportProgressRequest(trial_id=1, progress=0.5, reporter_id="r", seq=1)
    fenced = await refusal(api.ReportProgress(report, metadata=token, timeout=CALL_S))
    assert fenced.code() == grpc.StatusCode.UNAVAILABLE
    # Creating an experiment reads nothing from PostgreSQL.
    second = await create(api)
    assert second == first + 1
    await asyncio.sleep(1.0)  # the projector tries again meanwhile, and waits
    assert not gateway.projector_task.done()
    assert not gateway.projector.available
    with pytest.raises(ReadModelsUnavailableError):  # at once: it cannot move
        await gateway.projector.catch_up(timeout_s=CALL_S)

    postgres.start()

    async def shown() -> bool:
        with_second = api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=second), timeout=CALL_S)
        try:
            return (await with_second).experiment.id == second
        except grpc.aio.AioRpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            return False

    await until(shown)
    assert await gateway.projector.catch_up()
    await api.ReportProgress(report, metadata=token, timeout=CALL_S)
    assert await gateway.projector.catch_up()
    # Resumed from the stored position: every event applied once, in order.
    last = await event_store.last_sequence()
    assert await gateway.pool.fetchval(f"SELECT sequence FROM {SCHEMA}.projection_position") == last
    experiments = await api.GetExperiments(api_pb2.GetExperimentsRequest(), timeout=CALL_S)
    assert [e.id for e in experiments.experiments] == [first, second]
    trial = await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1), timeout=CALL_S)
    assert trial.trial.progress == 0.5


async def test_the_projector_follows_across_outages(
    gateway: Gateway, postgres: PostgresServer, event_store: EventStore
) -> None:
    """Events appended before, during and after two outages all land once."""
    for round_ in range(2):
        for trial_id in range(10 * round_ + 1, 10 * round_ + 6):
            await given_trial_run(event_store, trial_id)
        postgres.stop()
        for trial_id in range(10 * round_ + 6, 10 * round_ + 11):
            await given_trial_run(event_store, trial_id)
        await asyncio.sleep(0.5)
        postgres.start()
    await asyncio.wait_for(gateway.projector.wait_available(), 30.0)
    assert await gateway.projector.catch_up(timeout_s=30.0), _where_the_projector_waits(gateway)
    assert await gateway.pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.trials") == 20
    assert await gateway.pool.fetchval(f"SELECT count(*) FROM {SCHEMA}.allocations") == 20


async def test_a_connection_closed_inside_a_transaction_counts_as_postgres_down(database_url: str) -> None:
    """When PostgreSQL closes the connection under a transaction, asyncpg's
    rollback on the way out raises InterfaceError in place of the error that
    said so; left that way, it ended the projector (an outage that struck
    while it created the read models, seen on a loaded machine)."""
    connection = await asyncpg.connect(database_url)
    killer = await asyncpg.connect(database_url)
    try:
        with pytest.raises(POSTGRES_DOWN):
            async with transaction(connection):
                await killer.execute("SELECT pg_terminate_backend($1)", connection.get_server_pid())
                await connection.execute("SELECT 1")
    finally:
        await killer.close()
        await connection.close()


async def test_a_reader_that_lost_its_cancellation_is_stopped_all_the_same() -> None:
    """Python 3.11's asyncio.wait_for drops a cancellation that comes together
    with its result: the projector's reader then went on into a full queue,
    and the projector, stopping it after PostgreSQL went away, waited for it
    forever (no log line, still "available"; seen on a loaded CI machine)."""
    queue: asyncio.Queue[int] = asyncio.Queue(1)

    async def reader() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # as wait_for does then
            await asyncio.sleep(3600)
        while True:
            await queue.put(1)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0)
    await asyncio.wait_for(_stopped(task), CALL_S)
    assert task.cancelled()


def _where_the_projector_waits(gateway: Gateway) -> str:
    """What the projector has applied and what its tasks await, coroutine by
    coroutine: a failed wait's message (a stall on a loaded CI machine left
    no other trace)."""
    projector = gateway.projector
    tasks = [
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").startswith("Projector.")
    ]
    awaiting = "; ".join(f"{task.get_name()}: {_awaited(task.get_coro())}" for task in tasks)
    return f"projector at {projector.position}, available: {projector.available}; {awaiting}"


def _awaited(coroutine: object) -> str:
    steps = []
    while coroutine is not None:
        frame = getattr(coroutine, "cr_frame", None) or getattr(coroutine, "ag_frame", None)
        steps.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}" if frame is not None else repr(coroutine))
        coroutine = getattr(coroutine, "cr_await", None) or getattr(coroutine, "ag_await", None)
    return " -> ".join(steps)


def test_a_gateway_started_while_postgres_is_down_becomes_ready_once_it_is_back(
    nats_url: str, namespace: str, own_database_url: str, postgres: PostgresServer, tmp_path: Path
) -> None:
    postgres.stop()
    ready = tmp_path / "ready"
    port = free_port()
    environment = {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_DATABASE_URL": own_database_url,
        "DET_GATEWAY_PORT": str(port),
        "DET_GATEWAY_HOST": "127.0.0.1",
        "DET_READY_FILE": str(ready),
        "DET_GRACE_PERIOD_S": "0.5",
        "DET_ALLOW_ANONYMOUS": "true",
        "DET_ALLOW_BLANK_PASSWORD": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.gateway"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        asyncio.run(_listens_without_postgres(port, process))
        assert not ready.exists()
        postgres.start()
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "the gateway never wrote its ready file"
            time.sleep(0.05)
        asyncio.run(_answers(port))
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        output = process.communicate()[0]
    finally:
        process.kill()
        process.wait()
    # One line when the outage is noticed and one when it ends, not one per retry.
    assert output.count("read_models_unavailable") == 1, output
    assert output.count("read_models_available") == 1, output
    assert "Traceback" not in output, output


async def _listens_without_postgres(port: int, process: "subprocess.Popen[str]") -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        end = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                await api.GetMaster(api_pb2.GetMasterRequest(), timeout=CALL_S)
                break
            except grpc.aio.AioRpcError:
                assert time.monotonic() < end, "the gateway never listened"
                await asyncio.sleep(0.1)
        down = await refusal(api.GetExperiments(api_pb2.GetExperimentsRequest(), timeout=CALL_S))
        assert down.code() == grpc.StatusCode.UNAVAILABLE, down
        await asyncio.sleep(1.0)  # several retries: still one log line
        created = await api.CreateExperiment(
            api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True), timeout=CALL_S
        )
        assert created.experiment_id == 1


async def _answers(port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        experiments = await api.GetExperiments(api_pb2.GetExperimentsRequest(), timeout=CALL_S)
        assert [e.id for e in experiments.experiments] == [1]
