"""The SDK against the real gateway (real nats-server and PostgreSQL): an
experiment created from Python with its context, a trial of it (its events and
reports sent as the searcher and the harness send them), its checkpoints
listed, ranked and downloaded both ways, its metrics, the model registry, and
deletions; and the checkpoint CLI on the same checkpoints. The SDK is synchronous: it runs in a worker thread while the
gateway serves on the test's event loop."""

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import grpc
import pytest

from deploy.local.servers import free_port
from determined.experimental import client
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

SECRET = "sdk-test-secret"
T = TypeVar("T")


@pytest.fixture
async def gateway(nats_url: str, namespace: str, database_url: str) -> AsyncIterator[Gateway]:
    settings = GatewaySettings(
        nats_url=nats_url,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        cluster_id="sdk-test",
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )
    started = await Gateway.start(settings)
    yield started
    await started.stop()


async def sdk(call: Callable[..., T], *args: object, **kwargs: object) -> T:
    """An SDK call, made off the event loop the gateway serves on."""
    return await asyncio.to_thread(call, *args, **kwargs)


async def det(gateway: Gateway, *argv: str) -> tuple[int | None, str, str]:
    """The det CLI as a process of its own: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "determined.cli",
        "-m",
        f"127.0.0.1:{gateway.port}",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, error = await process.communicate()
    return process.returncode, out.decode(), error.decode()


async def start_trial(store: EventStore, experiment_id: int, trial_id: int) -> None:
    """The trial and its first run (allocation <trial>.1), as the searcher and its lifecycle append them."""
    created = events_pb2.TrialCreated(
        trial_id=trial_id, experiment_id=experiment_id, hparams_json='{"lr": 0.1}'
    )
    await store.append(Append(f"trial/{trial_id}", created, f"trial-{trial_id}"), actor="service:searcher")
    launch = events_pb2.TrialLaunch(experiment_id=experiment_id, trial_id=trial_id, trial_run_id=1)
    requested = events_pb2.AllocationRequested(
        allocation_id=f"{trial_id}.1", task_id=str(trial_id), task_type="TRIAL", trial=launch
    )
    await store.append(
        Append(f"allocation/{trial_id}.1", requested, f"allocation-requested-{trial_id}.1"),
        actor="service:searcher",
    )


async def report_checkpoint(
    api: api_pb2_grpc.DeterminedStub, root: Path, trial_id: int, steps: int, loss: float
) -> str:
    """What the harness does at a checkpoint: its files in the shared_fs storage, a
    validation at the same steps, then the report."""
    token = (("x-allocation-token", mint_allocation_token(SECRET, trial_id, f"{trial_id}.1")),)
    storage_id = str(uuid.uuid4())
    files = {
        "model.bin": bytes(range(256)) * (steps // 10),
        "metadata.json": json.dumps({"steps_completed": steps}),
    }
    for relpath, content in files.items():
        (root / storage_id / relpath).parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        (root / storage_id / relpath).write_bytes(data)
    validation = events_pb2.MetricReport(
        group="validation",
        steps_completed=steps,
        metrics_json=json.dumps({"loss": loss, "accuracy": 1 - loss}),
    )
    await api.ReportMetrics(
        api_pb2.ReportMetricsRequest(
            trial_id=trial_id, trial_run_id=1, batch_seq=steps, reports=[validation], reporter_id="sdk-test"
        ),
        metadata=token,
    )
    resources = {
        p.relative_to(root / storage_id).as_posix(): p.stat().st_size for p in (root / storage_id).iterdir()
    }
    await api.ReportCheckpoint(
        api_pb2.ReportCheckpointRequest(
            uuid=storage_id,
            trial_id=trial_id,
            allocation_id=f"{trial_id}.1",
            steps_completed=steps,
            metadata_json=files["metadata.json"],
            resources=resources,
        ),
        metadata=token,
    )
    return storage_id


async def test_the_sdk_drives_an_experiment_its_checkpoints_and_models(
    gateway: Gateway, event_store: EventStore, tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    (tmp_path / "context").mkdir()
    (tmp_path / "context" / "train.py").write_text("print('training')\n")
    config = {
        "name": "sdk",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True, "max_length": 30},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(root)},
    }
    determined = client.Determined(f"127.0.0.1:{gateway.port}")
    experiment = await sdk(determined.create_experiment, config, tmp_path / "context")
    assert experiment.state is client.ExperimentState.ACTIVE and experiment.name == "sdk"
    assert (await sdk(experiment.get_config))["checkpoint_storage"]["host_path"] == str(root)
    assert experiment.id in {e.id for e in await sdk(determined.list_experiments)}

    await start_trial(event_store, experiment.id, trial_id=1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        worse = await report_checkpoint(api, root, 1, steps=10, loss=0.5)
        best = await report_checkpoint(api, root, 1, steps=20, loss=0.2)
        latest = await report_checkpoint(api, root, 1, steps=30, loss=0.4)
    assert await gateway.projector.catch_up()

    trial = await sdk(experiment.await_first_trial, 0.05)
    assert (trial.id, trial.hparams) == (1, {"lr": 0.1})
    assert [t.id for t in await sdk(experiment.list_trials)] == [1]
    assert [m.steps_completed for m in await sdk(lambda: list(trial.iter_metrics("validation")))] == [
        10,
        20,
        30,
    ]

    # Best first by the searcher metric (smaller is better), or sorted as asked.
    assert [c.uuid for c in await sdk(experiment.list_checkpoints)] == [best, latest, worse]
    top = await sdk(experiment.top_checkpoint)
    assert top.uuid == best and top.training.searcher_metric == pytest.approx(0.2)
    assert top.training.validation_metrics["accuracy"] == pytest.approx(0.8)
    assert (await sdk(trial.top_checkpoint)).uuid == best
    assert (await sdk(trial.top_checkpoint, "accuracy", False)).uuid == best
    by_steps = await sdk(trial.list_checkpoints, client.CheckpointSortBy.BATCH_NUMBER, client.OrderBy.DESC, 2)
    assert [c.uuid for c in by_steps] == [latest, best]

    # Downloads: straight from the shared_fs folder, and streamed by the gateway.
    for mode in client.DownloadMode:
        path = Path(await sdk(top.download, tmp_path / mode.value, mode))
        assert (path / "model.bin").read_bytes() == (root / best / "model.bin").read_bytes()
        assert json.loads((path / "metadata.json").read_text()) == {"steps_completed": 20}

    # The CLI on the same checkpoints.
    code, out, _ = await det(gateway, "e", "lc", str(experiment.id), "--best", "1", "--json")
    assert code == 0 and [c["uuid"] for c in json.loads(out)] == [best]
    policy = ["--save-experiment-best", "0", "--save-trial-best", "1", "--save-trial-latest", "1"]
    code, out, _ = await det(
        gateway, "e", "set", "gc-policy", str(experiment.id), *policy, "--dry-run", "--json"
    )
    preview = json.loads(out)
    assert code == 0
    assert [c["uuid"] for c in preview["checkpoints"]] == [worse] and preview["applied"] is False
    assert preview["bytes"] == sum((await sdk(determined.get_checkpoint, worse)).resources.values())
    target = tmp_path / "cli"
    code, out, _ = await det(gateway, "c", "download", latest, "-o", str(target), "--mode", "master", "-q")
    assert (code, out) == (0, f"{target}\n")
    assert (target / "model.bin").read_bytes() == (root / latest / "model.bin").read_bytes()

    # The registry: a registered checkpoint may not be deleted; another may.
    model = await sdk(determined.create_model, "sdk-model", "from the SDK test")
    version = await sdk(model.register_version, best)
    assert (version.model_name, version.model_version, version.checkpoint.uuid) == ("sdk-model", 1, best)
    fetched = await sdk(determined.get_model, "sdk-model")
    assert [v.checkpoint.uuid for v in await sdk(fetched.get_versions)] == [best]
    assert [m.name for m in await sdk(determined.list_models)] == ["sdk-model"]
    assert (await sdk(determined.get_checkpoint, best)).model_versions == ["sdk-model:1"]
    with pytest.raises(client.APIError) as refused:
        await sdk(top.delete)
    assert refused.value.code == "INVALID_ARGUMENT" and best in str(refused.value)
    await sdk((await sdk(determined.get_checkpoint, worse)).delete)
    with pytest.raises(client.APIError) as unknown:
        await sdk(determined.get_checkpoint, "no-such-checkpoint")
    assert unknown.value.code == "NOT_FOUND"

    # Pausing, activating and killing are asked of the services (none runs here): the kill is
    # recorded at once.
    await sdk(experiment.pause)
    await sdk(experiment.activate)
    await sdk(experiment.kill)
    await gateway.projector.catch_up()
    await sdk(experiment.reload)
    assert experiment.state is client.ExperimentState.STOPPING_KILLED
    code, _, error = await det(gateway, "e", "delete", str(experiment.id), "--yes")
    assert code == 1 and "COMPLETED" in error  # only an ended experiment may be deleted
