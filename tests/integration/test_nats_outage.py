"""Outages of nats-server are waited out, not crashed on: each test runs its
own nats-server, kills it (SIGKILL) and starts it again on the same store
folder and port, a few seconds later."""

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from support.own_nats import OwnNats
from support.toy_cores import two_trials_core

from deploy.local.servers import free_port
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common import connection
from services.common.decider import Shell
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

OUTAGE_S = 1.5
CONFIG = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters: {lr: 0.1}
"""


async def until(condition: Callable[[], Awaitable[bool]], what: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while not await condition():
        assert time.monotonic() < end, f"{what}: not before the deadline"
        await asyncio.sleep(0.05)


async def event_ids(store: EventStore) -> list[str]:
    return [stored.envelope.event_id async for stored in store.read(None, follow=False)]


def created(experiment_id: int) -> Append:
    payload = events_pb2.ExperimentCreated(experiment_id=experiment_id)
    return Append(f"experiment/{experiment_id}", payload, f"create-{experiment_id}")


async def test_an_append_made_during_an_outage_lands_once_after(own_nats: OwnNats, namespace: str) -> None:
    store = await EventStore.connect(own_nats.url, namespace)
    try:
        await store.append(created(1), actor="user:test")
        own_nats.kill()
        appending = asyncio.create_task(store.append(created(2), actor="user:test"))
        await asyncio.sleep(OUTAGE_S)
        assert not appending.done()
        own_nats.start()
        sequence, _ = await asyncio.wait_for(appending, 30)
        assert sequence == 2
        assert await event_ids(store) == ["create-1", "create-2"]
    finally:
        await store.close()


async def test_an_append_whose_answer_was_lost_is_stored_once(
    own_nats: OwnNats, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-server stopped (SIGSTOP) while an append is in flight: the append
    times out and is tried again; the server then stores the first attempt,
    and the retry finds it rather than storing it twice."""
    monkeypatch.setattr(connection, "REQUEST_TIMEOUT_S", 0.5)
    store = await EventStore.connect(own_nats.url, namespace)
    assert own_nats.process is not None
    try:
        own_nats.process.send_signal(signal.SIGSTOP)
        appending = asyncio.create_task(store.append(created(1), actor="user:test"))
        await asyncio.sleep(OUTAGE_S)  # the first attempt and a retry time out
        own_nats.process.send_signal(signal.SIGCONT)
        sequence, _ = await asyncio.wait_for(appending, 30)
        assert sequence == 1
        assert await event_ids(store) == ["create-1"]
    finally:
        own_nats.process.send_signal(signal.SIGCONT)
        await store.close()


async def test_a_shell_keeps_deciding_across_a_restart(own_nats: OwnNats, namespace: str) -> None:
    """The Shell's reading of the log goes on after the outage from where it
    was: what it decided before is not decided again, what came during and
    after is decided once."""
    service = await EventStore.connect(own_nats.url, namespace, name="service")
    user = await EventStore.connect(own_nats.url, namespace, name="user")
    core = two_trials_core()
    ready = asyncio.Event()

    async def caught_up() -> None:
        ready.set()

    shell = asyncio.create_task(Shell(service, core, "service:test", on_caught_up=caught_up).run())
    try:
        await asyncio.wait_for(ready.wait(), 30)
        await user.append(created(1), actor="user:test")
        await until(lambda: _has(user, "t-1-2"), "trials of experiment 1")
        own_nats.kill()
        during = asyncio.create_task(user.append(created(2), actor="user:test"))
        await asyncio.sleep(OUTAGE_S)
        own_nats.start()
        await asyncio.wait_for(during, 30)
        await user.append(created(3), actor="user:test")
        await until(lambda: _has(user, "t-3-2"), "trials of experiment 3")
        await until(lambda: _has(user, "t-2-2"), "trials of experiment 2")
    finally:
        shell.cancel()
        await asyncio.gather(shell, return_exceptions=True)
        await service.close()
    ids = await event_ids(user)
    await user.close()
    assert sorted(ids) == sorted(
        ["create-1", "t-1-1", "t-1-2", "create-2", "t-2-1", "t-2-2", "create-3", "t-3-1", "t-3-2"]
    )


async def _has(store: EventStore, event_id: str) -> bool:
    return event_id in await event_ids(store)


def test_a_service_started_while_nats_is_down_waits_for_it(tmp_path: Path, namespace: str) -> None:
    """It gets ready once nats-server is up, and its log says each outage in
    two lines: when nats-server went away and when it was back."""
    nats_server = OwnNats(tmp_path / "nats")
    log_file, ready = tmp_path / "scheduler.log", tmp_path / "scheduler.ready"
    env = {
        **os.environ,
        "DET_NATS_URL": nats_server.url,
        "DET_NAMESPACE": namespace,
        "DET_READY_FILE": str(ready),
        "DET_LOG_FILE": str(log_file),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "services.scheduler"], env=env, stdin=subprocess.DEVNULL
    )
    try:
        _wait_for(lambda: "nats_unavailable" in _text(log_file), process, "the first outage line")
        time.sleep(OUTAGE_S)  # several attempts to connect
        assert not ready.exists()
        nats_server.start()
        _wait_for(ready.exists, process, "the ready file")
        nats_server.kill()
        _wait_for(lambda: "nats_disconnected" in _text(log_file), process, "the disconnect line")
        time.sleep(OUTAGE_S)
        nats_server.start()
        _wait_for(lambda: "nats_reconnected" in _text(log_file), process, "the reconnect line")
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if nats_server.process is not None:
            nats_server.kill()
    lines = _text(log_file).splitlines()
    for event in ("nats_unavailable", "nats_connected", "nats_disconnected", "nats_reconnected"):
        assert len([line for line in lines if f" {event} " in line]) == 1, (event, lines)
    assert "Traceback" not in _text(log_file)


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _wait_for(condition: Callable[[], bool], process: subprocess.Popen[bytes], what: str) -> None:
    end = time.monotonic() + 60  # a bound against a hang (the machine may be loaded), not a speed check
    while not condition():
        assert process.poll() is None, f"the service exited ({process.returncode}) before {what}"
        assert time.monotonic() < end, f"no {what} before the deadline"
        time.sleep(0.05)


async def test_the_gateway_answers_unavailable_during_an_outage(
    own_nats: OwnNats, namespace: str, database_url: str
) -> None:
    """An RPC that needs nats-server answers UNAVAILABLE naming it; the
    gateway stays up and answers again once nats-server is back."""
    settings = GatewaySettings(
        nats_url=own_nats.url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret="secret",
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )
    gateway = await Gateway.start(settings)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
            api = api_pb2_grpc.DeterminedStub(channel)
            first = await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG))
            trial = events_pb2.TrialCreated(trial_id=1, experiment_id=first.experiment_id, hparams_json="{}")
            await gateway.store.append(Append("trial/1", trial, "trial-1"), actor="service:searcher")
            assert await gateway.projector.catch_up()
            own_nats.kill()
            for call in (
                api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG)),
                _all(api.TrialLogs(api_pb2.TrialLogsRequest(trial_id=1))),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as raised:
                    await asyncio.wait_for(call, 20)
                assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "nats-server" in (raised.value.details() or "")
            assert not gateway.projector_task.done()
            own_nats.start()
            second = await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG))
            described = await api.GetExperiment(
                api_pb2.GetExperimentRequest(experiment_id=second.experiment_id)
            )
            assert described.experiment.id == second.experiment_id == first.experiment_id + 1
    finally:
        await gateway.stop()


async def _all(stream: AsyncIterator[api_pb2.TrialLogsResponse]) -> list[api_pb2.TrialLogsResponse]:
    return [response async for response in stream]
