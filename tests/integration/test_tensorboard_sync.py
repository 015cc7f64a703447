"""Trials' TensorBoard files from the Core API to their checkpoint storage (S3 on moto's server,
and shared_fs), then a TensorBoard task (`python -m determined.exec.tensorboard`, one for the
module) over those trials answering through its proxy prefix with their scalar tags."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env
from support.s3_server import S3Server

import determined as det
from deploy.local.servers import free_port
from determined.core import TensorboardMode

DEADLINE_S = 120.0


@dataclass(frozen=True)
class Trials:
    s3: dict[str, Any]
    shared_fs: dict[str, Any]
    work: pathlib.Path


def run_trial(
    gateway: Server,
    storage: dict[str, Any],
    experiment_id: int,
    trial_id: int,
    metrics: dict[str, float],
    mode: TensorboardMode = TensorboardMode.AUTO,
) -> None:
    """A trial reporting `metrics` at step 1 (AUTO), or writing them itself with tensorboardX and
    uploading (MANUAL, as the PyTorch Trainer does)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        set_trial_env(
            monkeypatch,
            gateway.port,
            {"checkpoint_storage": storage},
            DET_EXPERIMENT_ID=str(experiment_id),
            DET_TRIAL_ID=str(trial_id),
        )
        with det.core.init(tensorboard_mode=mode) as core_context:
            if mode is TensorboardMode.AUTO:
                core_context.train.report_training_metrics(1, metrics)
                return
            import tensorboardX

            writer = tensorboardX.SummaryWriter(str(core_context.train.get_tensorboard_path()))
            for tag, value in metrics.items():
                writer.add_scalar(tag, value, 1)
            writer.close()
            core_context.train.upload_tensorboard_files()
    det.get_cluster_info.cache_clear()


@pytest.fixture(scope="module")
def gateway() -> Iterator[Server]:
    server = Server(FakeGateway())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def trials(
    gateway: Server, s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Trials]:
    """Experiment 3 (S3): trial 7 in AUTO mode, trial 8 in MANUAL mode; experiment 4
    (shared_fs): trial 9. Each trial's staging folder is the module's own."""
    work = tmp_path_factory.mktemp("tensorboard")
    s3 = s3_server.storage(prefix="team")
    shared_fs = {"type": "shared_fs", "host_path": str(work / "shared")}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(tempfile, "tempdir", str(work / "staging"))
        run_trial(gateway, s3, 3, 7, {"loss": 0.5})
        run_trial(gateway, s3, 3, 8, {"written/by_the_trial": 2.0}, TensorboardMode.MANUAL)
        run_trial(gateway, shared_fs, 4, 9, {"loss": 0.25})
        yield Trials(s3, shared_fs, work)


@dataclass(frozen=True)
class Task:
    url: str  # its base URL: DET_PROXY_PREFIX on its port
    process: "subprocess.Popen[bytes]"
    log: pathlib.Path


@pytest.fixture(scope="module")
def tensorboard(trials: Trials, s3_server: S3Server) -> Iterator[Task]:
    """The TensorBoard task over the three trials and one source whose bucket does not exist."""
    sources = [
        {"experiment_id": 3, "trial_id": 7, "storage": trials.s3},
        {"experiment_id": 3, "trial_id": 8, "storage": trials.s3},
        {"experiment_id": 4, "trial_id": 9, "storage": trials.shared_fs},
        {"experiment_id": 5, "trial_id": 1, "storage": s3_server.storage(bucket="no-such-bucket")},
    ]
    folder = trials.work / "task"
    folder.mkdir()
    (folder / "sources.json").write_text(json.dumps(sources))
    port, prefix = free_port(), f"/proxy/{uuid.uuid4()}/"
    env = {
        **os.environ,
        "DET_TASK_HOST": "127.0.0.1",
        "DET_TASK_PORT": str(port),
        "DET_PROXY_PREFIX": prefix,
        "DET_TENSORBOARD_SOURCES_FILE": str(folder / "sources.json"),
    }
    log = folder / "task.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "determined.exec.tensorboard"],
            cwd=folder,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        yield Task(f"http://127.0.0.1:{port}{prefix}", process, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(60)


def tags(base_url: str, wanted: dict[str, set[str]]) -> dict[str, set[str]]:
    """The runs' scalar tags, once TensorBoard lists at least `wanted`."""
    deadline = time.monotonic() + DEADLINE_S
    found: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"{base_url}data/plugin/scalars/tags", timeout=10)
            found = {run: set(run_tags) for run, run_tags in answer.json().items()}
        except (httpx.HTTPError, ValueError):
            pass
        if all(tag_set <= found.get(run, set()) for run, tag_set in wanted.items()):
            return found
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard listed {found}, not yet {wanted}")


def test_the_trials_files_are_in_their_storage(trials: Trials, s3_server: S3Server) -> None:
    keys = s3_server.keys(trials.s3["bucket"])
    assert any(key.startswith("team/tensorboard/experiment/3/trial/7/events.out.tfevents.") for key in keys)
    assert any(key.startswith("team/tensorboard/experiment/3/trial/8/events.out.tfevents.") for key in keys)
    shared = pathlib.Path(trials.shared_fs["host_path"], "tensorboard", "experiment", "4", "trial", "9")
    assert [path.name.startswith("events.out.tfevents.") for path in shared.iterdir()] == [True]


def test_tensorboard_shows_each_trial_as_a_run_with_its_tags(tensorboard: Task) -> None:
    wanted = {
        "experiment/3/trial/7": {"loss"},
        "experiment/3/trial/8": {"written/by_the_trial"},
        "experiment/4/trial/9": {"loss"},
    }
    assert set(tags(tensorboard.url, wanted)) == set(wanted)
    assert httpx.get(tensorboard.url, timeout=30).status_code == 200  # what the agent probes


def test_files_written_later_are_shown_while_it_runs(
    tensorboard: Task, trials: Trials, gateway: Server
) -> None:
    tags(tensorboard.url, {"experiment/3/trial/7": {"loss"}})  # the first copy is done
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(tempfile, "tempdir", str(trials.work / "staging"))
        run_trial(gateway, trials.s3, 3, 7, {"later": 1.0})
    tags(tensorboard.url, {"experiment/3/trial/7": {"loss", "later"}})


def test_a_bad_source_is_logged_once_and_sigterm_stops_it(tensorboard: Task) -> None:
    tags(tensorboard.url, {"experiment/3/trial/7": {"loss"}})  # a few refreshes have run
    tensorboard.process.send_signal(signal.SIGTERM)
    assert tensorboard.process.wait(60) == 0  # TensorBoard stops cleanly on SIGTERM
    text = tensorboard.log.read_text()
    assert text.count("experiment 5's TensorBoard files cannot be listed") == 1
    assert "NoSuchBucket" in text
