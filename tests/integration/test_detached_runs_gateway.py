"""Detached runs (determined.experimental.core_v2) against a real gateway and the searcher's
shells over the tests' nats-server and PostgreSQL: a script in this process (in a thread, as
a plain script calls) becomes an unmanaged experiment's one trial with its metrics and
checkpoint; a script that raises ends ERROR; one that goes silent ends ERROR after the
heartbeat timeout; and a user's login reports only for a detached run of its own that has
not ended."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from support import module_gateway
from support.pg_server import new_database
from support.security_gateway import MALLORY_PASSWORD, PASSWORD, gateway_settings, logged_in

from deploy.local.servers import PostgresServer
from determined.experimental._determined import Determined
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.eventstore import EventStore
from services.common.service import run_shells
from services.common.settings import CommonSettings
from services.gateway.server import Gateway
from services.searcher.core import SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore
from services.searcher.unmanaged import UnmanagedTrialsCore

module_namespace = module_gateway.module_namespace
store = module_gateway.store
stub = module_gateway.stub

TIMEOUT_S = 2.0
DEADLINE_S = 60.0
Metadata = tuple[tuple[str, str], ...]


@pytest.fixture(scope="module")
async def gateway(
    nats_url: str, module_namespace: str, postgres_server: PostgresServer
) -> AsyncIterator[Gateway]:
    """The module's gateway, with a short heartbeat timeout."""
    database_url = await new_database(postgres_server, module_namespace)
    settings = gateway_settings(nats_url, module_namespace, database_url, "detached-test", PASSWORD)
    started = await Gateway.start(settings.model_copy(update={"unmanaged_timeout_s": TIMEOUT_S}))
    yield started
    await started.stop()


@pytest.fixture(scope="module")
async def searcher(store: EventStore, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[None]:
    """The searcher's three cores, as `python -m services.searcher` runs them."""
    ready = tmp_path_factory.mktemp("searcher") / "ready"
    settings = CommonSettings(namespace=store.namespace, ready_file=ready)
    cores = (SearcherCore(), TrialLifecycleCore(), UnmanagedTrialsCore())
    task = asyncio.create_task(run_shells(store, settings, *cores, name="searcher", tick_s=0.2))
    await eventually(ready.exists, "the searcher to get ready")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture(scope="module")
async def admin(stub: api_pb2_grpc.DeterminedStub, searcher: None) -> Metadata:
    token = await logged_in(stub)
    await stub.CreateUser(
        api_pb2.CreateUserRequest(username="mallory", password=MALLORY_PASSWORD), metadata=token
    )
    return token


@pytest.fixture(scope="module")
async def mallory(stub: api_pb2_grpc.DeterminedStub, admin: Metadata) -> Metadata:
    return await logged_in(stub, "mallory", MALLORY_PASSWORD)


@pytest.fixture
async def client(
    gateway: Gateway, admin: Metadata, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Determined:
    """The SDK as the admin, its token cache in the test's folder (it logs in at once: in a
    thread, as every call of the SDK here, while the gateway answers on this loop)."""
    monkeypatch.setenv("DET_CONFIG_DIR", str(tmp_path / "cli"))
    return await asyncio.to_thread(
        Determined, master=f"127.0.0.1:{gateway.port}", user="admin", password=PASSWORD
    )


async def eventually(condition: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
    return found


async def ended(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, experiment_id: int
) -> api_pb2.GetExperimentResponse:
    """The experiment once it and its trial have ended."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        got = await stub.GetExperiment(
            api_pb2.GetExperimentRequest(experiment_id=experiment_id), metadata=admin
        )
        if got.experiment.state in ("COMPLETED", "ERROR", "CANCELED") and got.trials:
            return got
        assert time.monotonic() < deadline, f"experiment {experiment_id} did not end: {got.experiment.state}"
        await asyncio.sleep(0.05)


def training_script(client: Determined, storage: Path) -> int:
    """What a plain script does: init, report, checkpoint, close; its experiment's id."""
    from determined.experimental import core_v2

    config = core_v2.Config(
        name="detached", hparams={"lr": 0.1}, labels=["sdk"], searcher={"name": "single", "metric": "loss"}
    )
    core_v2.init(config=config, client=client, checkpoint_storage=str(storage))
    assert core_v2.train is not None and core_v2.checkpoint is not None and core_v2.info is not None
    assert core_v2.info.trial.hparams == {"lr": 0.1}
    for step in (1, 2):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
    core_v2.train.report_validation_metrics(steps_completed=2, metrics={"loss": 0.25})
    with core_v2.checkpoint.store_path({"steps_completed": 2}) as (path, _):
        (path / "model.txt").write_text("weights")
    experiment_id = core_v2.info.trial.experiment_id
    core_v2.close()
    assert core_v2.train is None
    return experiment_id


async def test_a_detached_script_reports_its_metrics_and_checkpoint(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, client: Determined, tmp_path: Path
) -> None:
    experiment_id = await asyncio.to_thread(training_script, client, tmp_path / "checkpoints")
    got = await ended(stub, admin, experiment_id)
    experiment, [trial] = got.experiment, got.trials
    assert (experiment.state, experiment.unmanaged, experiment.owner) == ("COMPLETED", True, "admin")
    assert (trial.state, json.loads(trial.hparams_json)) == ("COMPLETED", {"lr": 0.1})
    assert trial.latest_validation.steps_completed == 2 and trial.searcher_metric_value == 0.25
    checkpoints = await stub.GetTrialCheckpoints(
        api_pb2.GetTrialCheckpointsRequest(trial_id=trial.id), metadata=admin
    )
    [checkpoint] = checkpoints.checkpoints
    assert checkpoint.steps_completed == 2 and "model.txt" in checkpoint.resources
    assert (tmp_path / "checkpoints" / checkpoint.uuid / "model.txt").read_text() == "weights"


def failing_script(client: Determined) -> int:
    """A script whose `with` block raises: its experiment's id."""
    from determined.experimental import core_v2

    experiment_id = 0
    context = core_v2.init_context(config=core_v2.Config(name="failing"), client=client)
    with pytest.raises(ValueError, match="diverged"), context:
        assert context.info is not None
        experiment_id = context.info.trial.experiment_id
        raise ValueError("the loss diverged")
    return experiment_id


async def test_a_script_that_raises_ends_error(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, client: Determined
) -> None:
    experiment_id = await asyncio.to_thread(failing_script, client)
    got = await ended(stub, admin, experiment_id)
    assert (got.experiment.state, got.trials[0].state) == ("ERROR", "ERROR")
    assert got.trials[0].end_reason == "ValueError: the loss diverged"


async def detached_trial(stub: api_pb2_grpc.DeterminedStub, user: Metadata) -> tuple[int, int]:
    """A detached run started by hand: its (experiment id, trial id)."""
    config = "name: by-hand\nsearcher: {name: single, metric: loss}\n"
    create = api_pb2.CreateExperimentRequest(config_yaml=config, activate=True, unmanaged=True)
    experiment_id = (await stub.CreateExperiment(create, metadata=user)).experiment_id
    start = api_pb2.StartUnmanagedTrialRequest(experiment_id=experiment_id)
    started = await stub.StartUnmanagedTrial(start, metadata=user)
    assert started.heartbeat_timeout_s == TIMEOUT_S and started.heartbeat_s == TIMEOUT_S / 5
    return experiment_id, started.trial_id


def heartbeat(trial_id: int, seq: int = 1, end_state: str = "") -> api_pb2.ReportUnmanagedTrialRequest:
    return api_pb2.ReportUnmanagedTrialRequest(
        trial_id=trial_id, reporter_id="test", seq=seq, end_state=end_state
    )


async def test_a_silent_script_ends_error_after_the_timeout(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata
) -> None:
    experiment_id, trial_id = await detached_trial(stub, admin)
    await stub.ReportUnmanagedTrial(heartbeat(trial_id), metadata=admin)
    got = await ended(stub, admin, experiment_id)
    assert (got.experiment.state, got.trials[0].state) == ("ERROR", "ERROR")
    assert got.trials[0].end_reason.startswith(
        f"no heartbeat from the detached run's script for {TIMEOUT_S:g} s"
    )


async def refusal(call: Any, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == code, refused.value
    return str(refused.value.details())


def metrics(trial_id: int) -> api_pb2.ReportMetricsRequest:
    report = events_pb2.MetricReport(group="training", steps_completed=1, metrics_json='{"loss": 1.0}')
    return api_pb2.ReportMetricsRequest(
        trial_id=trial_id, trial_run_id=1, batch_seq=1, reporter_id="mallory", reports=[report]
    )


async def test_a_login_reports_only_for_its_own_live_detached_run(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, mallory: Metadata
) -> None:
    experiment_id, trial_id = await detached_trial(stub, admin)
    denied = grpc.StatusCode.PERMISSION_DENIED
    assert "admin's detached run" in await refusal(
        stub.ReportMetrics(metrics(trial_id), metadata=mallory), denied
    )
    assert "admin's detached run" in await refusal(
        stub.ReportUnmanagedTrial(heartbeat(trial_id), metadata=mallory), denied
    )
    start = api_pb2.StartUnmanagedTrialRequest(experiment_id=experiment_id)
    assert "admin's detached run" in await refusal(stub.StartUnmanagedTrial(start, metadata=mallory), denied)
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    assert "none of COMPLETED, ERROR" in await refusal(
        stub.ReportUnmanagedTrial(heartbeat(trial_id, end_state="PAUSED"), metadata=admin), invalid
    )
    await stub.ReportUnmanagedTrial(heartbeat(trial_id, seq=2, end_state="COMPLETED"), metadata=admin)
    assert (await ended(stub, admin, experiment_id)).experiment.state == "COMPLETED"
    closed = grpc.StatusCode.FAILED_PRECONDITION
    assert "has ended (COMPLETED)" in await refusal(
        stub.ReportMetrics(metrics(trial_id), metadata=admin), closed
    )


async def test_a_login_cannot_report_for_a_managed_trial(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, mallory: Metadata
) -> None:
    config = (
        "name: managed\nentrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 1}\n"
    )
    create = api_pb2.CreateExperimentRequest(config_yaml=config, activate=True)
    experiment_id = (await stub.CreateExperiment(create, metadata=mallory)).experiment_id
    get = api_pb2.GetExperimentTrialsRequest(experiment_id=experiment_id)

    async def trials() -> list[api_pb2.Trial]:
        return list((await stub.GetExperimentTrials(get, metadata=mallory)).trials)

    deadline = time.monotonic() + DEADLINE_S
    while not (found := await trials()):
        assert time.monotonic() < deadline, "the searcher created no trial"
        await asyncio.sleep(0.05)
    denied = grpc.StatusCode.PERMISSION_DENIED
    details = await refusal(stub.ReportMetrics(metrics(found[0].id), metadata=mallory), denied)
    assert "runs on the cluster: only a trial process" in details
    start = api_pb2.StartUnmanagedTrialRequest(experiment_id=experiment_id)
    closed = grpc.StatusCode.FAILED_PRECONDITION
    assert "not as a detached run" in await refusal(stub.StartUnmanagedTrial(start, metadata=mallory), closed)
    await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=experiment_id), metadata=mallory)


async def test_a_killed_detached_run_ends_canceled_and_its_script_closes_quietly(
    stub: api_pb2_grpc.DeterminedStub, admin: Metadata, client: Determined
) -> None:
    from determined.experimental import core_v2

    context = await asyncio.to_thread(
        core_v2.init_context, config=core_v2.Config(name="killed"), client=client
    )
    await asyncio.to_thread(context.start)
    assert context.info is not None
    experiment_id = context.info.trial.experiment_id
    await stub.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=experiment_id), metadata=admin)
    got = await ended(stub, admin, experiment_id)
    assert (got.experiment.state, got.trials[0].state, got.trials[0].end_reason) == (
        "CANCELED",
        "CANCELED",
        "killed by user",
    )
    await asyncio.to_thread(context.close)  # the cluster ended the trial: said, not raised
