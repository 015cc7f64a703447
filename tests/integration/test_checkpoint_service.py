"""The checkpoint service against a real nats-server and real storage
(a shared_fs folder, moto's S3 server): GC when an experiment ends, a
file the storage refuses to delete, `det experiment delete` (its checkpoints
and its TensorBoard files), and a service killed -9 in the middle of a GC."""

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import Message
from support.s3_server import S3Server

from determined import tensorboard
from determined.common import storage
from determined.proto import events_pb2 as ev
from services.checkpoint.__main__ import CheckpointSettings, run
from services.common.envelope import Append, aggregate, payload_of, subject_kind
from services.common.eventstore import EventStore

DEADLINE_S = 45.0
CONFIG: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
    "hyperparameters": {},
}
OUTCOMES = (ev.CheckpointDeleted, ev.CheckpointPartiallyDeleted)


class Experiment:
    """Appends what an experiment's trials and users would, and writes each
    checkpoint's files to the storage the way a trial does (upload)."""

    def __init__(
        self, store: EventStore, section: dict[str, Any], staging: Path, experiment_id: int = 1
    ) -> None:
        self.store = store
        self.section = section
        self.manager = storage.build(section)
        self.staging = staging
        self.experiment_id = experiment_id
        self.files: dict[str, dict[str, int]] = {}

    async def append(self, payload: Message, msg_id: str) -> None:
        key = {"experiment": "experiment_id", "checkpoint": "uuid", "validation": "trial_id"}
        kind = subject_kind(payload)
        name = aggregate(kind, getattr(payload, key[kind]))
        await self.store.append(Append(name, payload, msg_id), actor="test")

    async def create(self) -> None:
        config = {**CONFIG, "checkpoint_storage": self.section}
        created = ev.ExperimentCreated(experiment_id=self.experiment_id, config_json=json.dumps(config))
        await self.append(created, f"created-{self.experiment_id}")

    async def checkpoint(self, uuid: str, trial_id: int, steps: int, loss: float, files: int = 3) -> None:
        folder = self.staging / uuid
        folder.mkdir(parents=True)
        for n in range(files):
            (folder / f"shard-{n}.bin").write_bytes(os.urandom(64 + n))
        (folder / "metadata.json").write_text(json.dumps({"steps_completed": steps}))
        await asyncio.to_thread(self.manager.upload, folder, uuid)
        self.files[uuid] = storage.local_resources(folder)
        metrics = json.dumps({"loss": loss})
        common = {"trial_id": trial_id, "experiment_id": self.experiment_id, "steps_completed": steps}
        await self.append(ev.TrialValidationReported(**common, metrics_json=metrics), f"validation-{uuid}")
        await self.append(
            ev.CheckpointReported(uuid=uuid, **common, resources=self.files[uuid]), f"ckpt-{uuid}"
        )

    async def end(self) -> None:
        ended = ev.ExperimentStateChanged(
            experiment_id=self.experiment_id, state=ev.ExperimentState.EXPERIMENT_STATE_COMPLETED
        )
        await self.append(ended, f"ended-{self.experiment_id}")

    async def tensorboard_files(self, trial_id: int) -> None:
        """Writes a trial's TensorBoard files to the storage as the trial does."""
        folder = self.staging / f"tensorboard-{self.experiment_id}-{trial_id}"
        folder.mkdir(parents=True)
        (folder / "events.out.tfevents.1").write_bytes(os.urandom(128))
        trials = tensorboard.trial_storage(self.manager, self.experiment_id)
        await asyncio.to_thread(trials.upload, folder, str(trial_id))

    def tensorboards_stored(self) -> dict[str, int]:
        """The experiment's TensorBoard files in storage now."""
        return tensorboard.experiment_storage(self.manager).list_resources(str(self.experiment_id))

    def stored(self) -> set[str]:
        """The checkpoints with files in storage now, each checked to be whole."""
        present = {uuid for uuid in self.files if self.manager.list_resources(uuid)}
        for uuid in present:
            assert self.manager.list_resources(uuid) == self.files[uuid], f"{uuid} lost files"
        return present


async def events(store: EventStore, kinds: list[str]) -> list[Message]:
    return [p async for s in store.read(kinds, follow=False) if (p := payload_of(s.envelope)) is not None]


async def until(store: EventStore, kinds: list[str], done: Callable[[list[Message]], bool]) -> list[Message]:
    """The events of these kinds once `done` says they are all there."""
    deadline = time.monotonic() + DEADLINE_S
    while not done(found := await events(store, kinds)):
        assert time.monotonic() < deadline, f"timed out; last: {found[-3:]}"
        await asyncio.sleep(0.1)
    return found


def outcomes(found: list[Message]) -> dict[str, Message]:
    return {e.uuid: e for e in found if isinstance(e, OUTCOMES)}


@contextlib.asynccontextmanager
async def service(nats_url: str, namespace: str) -> AsyncIterator[None]:
    task = asyncio.create_task(run(CheckpointSettings(nats_url=nats_url, namespace=namespace)))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture(params=["shared_fs", "s3"])
def section(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "shared_fs":
        return {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}
    s3: S3Server = request.getfixturevalue("s3_server")
    return s3.storage(prefix="det")


async def test_an_ended_experiment_keeps_what_its_policy_says(
    event_store: EventStore, nats_url: str, namespace: str, section: dict[str, Any], tmp_path: Path
) -> None:
    experiment = Experiment(event_store, section, tmp_path / "staging")
    await experiment.create()
    # Trial 1: best at 200, latest 300. Trial 2: best and latest at 200.
    for uuid, trial_id, steps, loss in [("a", 1, 100, 0.5), ("b", 1, 200, 0.2), ("c", 1, 300, 0.3)]:
        await experiment.checkpoint(uuid, trial_id, steps, loss)
    for uuid, trial_id, steps, loss in [("d", 2, 100, 0.9), ("e", 2, 200, 0.1)]:
        await experiment.checkpoint(uuid, trial_id, steps, loss)
    async with service(nats_url, namespace):
        await experiment.end()
        found = await until(event_store, ["checkpoint"], lambda e: set(outcomes(e)) == {"a", "d"})
        assert all(isinstance(e, ev.CheckpointDeleted) for e in outcomes(found).values())
        assert experiment.stored() == {"b", "c", "e"}
        deleted = outcomes(found)["a"]
        assert isinstance(deleted, ev.CheckpointDeleted)
        assert deleted.bytes_freed == sum(experiment.files["a"].values())

        policy = ev.CheckpointGcPolicyChanged(experiment_id=1, save_trial_latest=0)
        await experiment.append(policy, "gc-policy-1-1")
        await until(event_store, ["checkpoint"], lambda e: len(outcomes(e)) == 5)
        assert experiment.stored() == set()
    requested = [
        e for e in await events(event_store, ["experiment"]) if isinstance(e, ev.CheckpointDeletionRequested)
    ]
    assert [(r.deletion_id, sorted(r.uuids), r.reason) for r in requested] == [
        (1, ["a", "d"], "experiment ended"),
        (2, ["b", "c", "e"], "gc policy changed"),
    ]


async def test_deleting_an_experiment_deletes_its_checkpoints_and_tensorboard_files(
    event_store: EventStore, nats_url: str, namespace: str, section: dict[str, Any], tmp_path: Path
) -> None:
    experiment = Experiment(event_store, section, tmp_path / "staging")
    other = Experiment(event_store, section, tmp_path / "staging", experiment_id=2)
    await experiment.create()
    await other.create()
    await experiment.checkpoint("a", 1, 100, 0.1)
    await experiment.tensorboard_files(1)
    await experiment.tensorboard_files(2)
    await other.tensorboard_files(3)
    await experiment.end()
    assert len(experiment.tensorboards_stored()) >= 2
    async with service(nats_url, namespace):
        await experiment.append(ev.ExperimentDeleteRequested(experiment_id=1), "experiment-delete-1-1")
        found = await until(
            event_store, ["experiment"], lambda e: any(isinstance(x, ev.ExperimentDeleted) for x in e)
        )
    [outcome] = [e for e in found if isinstance(e, ev.TensorboardFilesDeleted)]
    assert (outcome.delete_request, dict(outcome.remaining), outcome.error) == (1, {}, "")
    assert outcome.bytes_freed == 2 * 128
    assert experiment.tensorboards_stored() == {} and experiment.stored() == set()
    assert other.tensorboards_stored() != {}
    if section["type"] == "shared_fs":
        assert not (tmp_path / "checkpoints" / "tensorboard" / "experiment" / "1").exists()


@contextlib.contextmanager
def undeletable(path: Path) -> Iterator[None]:
    """A file the file system refuses to unlink: immutable for root
    (chattr +i), in a read-only folder for anyone else."""
    if os.geteuid() == 0:
        flag = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
        if flag.returncode:
            pytest.skip(f"cannot make a file immutable here: {flag.stderr.decode().strip()}")
        undo = ["chattr", "-i", str(path)]
    else:
        path.parent.chmod(0o555)
        undo = ["chmod", "755", str(path.parent)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


async def test_a_file_the_storage_refuses_is_reported_and_the_experiment_delete_fails_until_it_goes(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path
) -> None:
    section = {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}
    experiment = Experiment(event_store, section, tmp_path / "staging")
    await experiment.create()
    await experiment.checkpoint("a", 1, 100, 0.1)
    await experiment.checkpoint("b", 1, 200, 0.2)
    await experiment.tensorboard_files(1)
    await experiment.end()
    trial_folder = tmp_path / "checkpoints" / tensorboard.trial_folder(1, 1)
    stuck = tmp_path / "checkpoints" / "b" / "shard-1.bin"
    async with service(nats_url, namespace):
        with undeletable(stuck), undeletable(trial_folder / "events.out.tfevents.1"):
            await experiment.append(ev.ExperimentDeleteRequested(experiment_id=1), "experiment-delete-1-1")
            found = await until(
                event_store,
                ["experiment"],
                lambda e: any(isinstance(x, ev.ExperimentDeleteFailed) for x in e),
            )
            [failed] = [e for e in found if isinstance(e, ev.ExperimentDeleteFailed)]
            partial = outcomes(await events(event_store, ["checkpoint"]))["b"]
            assert isinstance(partial, ev.CheckpointPartiallyDeleted)
            assert dict(partial.remaining) == {"shard-1.bin": experiment.files["b"]["shard-1.bin"]}
            assert "shard-1.bin" in partial.error and "Operation not permitted" in partial.error
            assert failed.reason.startswith("1 checkpoint(s) could not be deleted: b: shard-1.bin")
            assert (
                "; tensorboard files: trial/1/events.out.tfevents.1: Operation not permitted" in failed.reason
            )
            [tensorboards] = [e for e in found if isinstance(e, ev.TensorboardFilesDeleted)]
            assert dict(tensorboards.remaining) == experiment.tensorboards_stored() != {}
            assert stuck.exists()
        await experiment.append(ev.ExperimentDeleteRequested(experiment_id=1), "experiment-delete-1-2")
        found = await until(event_store, ["experiment"], lambda e: isinstance(e[-1], ev.ExperimentDeleted))
    assert not (tmp_path / "checkpoints" / "b").exists() and experiment.stored() == set()
    assert not trial_folder.exists() and experiment.tensorboards_stored() == {}
    requested = [e for e in found if isinstance(e, ev.CheckpointDeletionRequested)]
    assert [sorted(r.uuids) for r in requested] == [["a", "b"], ["b"]]
    tensorboards = [e for e in found if isinstance(e, ev.TensorboardFilesDeleted)]
    assert [(t.delete_request, t.error == "") for t in tensorboards] == [(1, False), (2, True)]


def service_process(nats_url: str, namespace: str, folder: Path, run_number: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_READY_FILE": str(folder / f"ready-{run_number}"),
        "DET_LOG_FILE": str(folder / f"checkpoint-{run_number}.log"),
        # One at a time: the GC lasts long enough to be killed in the middle.
        "DET_CHECKPOINT_GC_WORKERS": "1",
    }
    return subprocess.Popen([sys.executable, "-m", "services.checkpoint"], env=env, stdin=subprocess.DEVNULL)


async def outcomes_seen(store: EventStore, count: int) -> None:
    """Returns as soon as `count` checkpoint outcomes are in the log (following
    it, not polling: the kill must land in the middle of the GC)."""
    seen = 0
    async with asyncio.timeout(DEADLINE_S):
        async with contextlib.aclosing(store.read(["checkpoint"], follow=True)) as read:
            async for stored in read:
                seen += isinstance(payload_of(stored.envelope), OUTCOMES)
                if seen >= count:
                    return


async def ready(process: subprocess.Popen[bytes], ready_file: Path) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not ready_file.exists():
        assert process.poll() is None, f"the checkpoint service exited with {process.returncode}"
        assert time.monotonic() < deadline, "the checkpoint service did not get ready"
        await asyncio.sleep(0.05)


async def test_a_service_killed_during_a_gc_of_1000_checkpoints_finishes_it_after_restart(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path
) -> None:
    section = {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}
    experiment = Experiment(event_store, section, tmp_path / "staging")
    await experiment.create()
    # 10 trials of 100 checkpoints; each trial's best is somewhere in the middle.
    for trial_id in range(1, 11):
        for step in range(1, 101):
            loss = abs(step - 10 * trial_id) + 0.5
            await experiment.checkpoint(f"t{trial_id}-{step:03}", trial_id, step, loss, files=2)
    kept = {f"t{t}-100" for t in range(1, 11)} | {f"t{t}-{10 * t:03}" for t in range(1, 11)}
    doomed = set(experiment.files) - kept

    first = service_process(nats_url, namespace, tmp_path, 1)
    try:
        await ready(first, tmp_path / "ready-1")
        await experiment.end()
        await outcomes_seen(event_store, 100)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    settled_at_kill = len(outcomes(await events(event_store, ["checkpoint"])))
    assert settled_at_kill < len(doomed), "the GC ended before the kill: nothing was tested"

    second = service_process(nats_url, namespace, tmp_path, 2)
    try:
        await ready(second, tmp_path / "ready-2")
        found = await until(event_store, ["checkpoint"], lambda e: set(outcomes(e)) >= doomed)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(10) == 0
    recorded = outcomes(found)
    assert set(recorded) == doomed
    assert all(isinstance(e, ev.CheckpointDeleted) for e in recorded.values())
    assert len([e for e in found if isinstance(e, OUTCOMES)]) == len(doomed), "an outcome was recorded twice"
    assert experiment.stored() == kept
    requested = [
        e for e in await events(event_store, ["experiment"]) if isinstance(e, ev.CheckpointDeletionRequested)
    ]
    assert [set(r.uuids) for r in requested] == [doomed]
