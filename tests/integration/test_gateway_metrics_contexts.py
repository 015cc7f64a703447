"""The gateway against a real nats-server and PostgreSQL, for what `det`
reads and sends in bulk: every metric point of a trial (GetTrialMetrics),
contexts streamed in chunks (UploadContext, then CreateExperiment naming the
hash, then the agent's streamed fetch), and commands that change nothing.
Also through the `det` CLI itself, run as a process."""

import asyncio
import csv
import hashlib
import io
import json
import os
import sys
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
import test_gateway
from test_gateway import CONFIG, given_trial, stored, until
from test_gateway_stop_resume import append, next_run, refused, token_of

from determined.cli._client import CliError
from determined.cli._client import Gateway as CliGateway
from determined.cli._upload import upload_context
from determined.common.context import ContextError, ContextFiles, context_files, extract_context
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.contexts import CONTEXT_CHUNK_BYTES
from services.common.eventstore import EventStore
from services.gateway.features.experiments import commands as experiment_commands
from services.gateway.features.trials.service import METRICS_PAGE
from services.gateway.server import Gateway

gateway = test_gateway.gateway


def reports(group: str, steps: Iterable[int], run_id: int = 1) -> list[events_pb2.MetricReport]:
    return [
        events_pb2.MetricReport(
            group=group, steps_completed=s, metrics_json=json.dumps({"step": s, "run": run_id})
        )
        for s in steps
    ]


async def report(
    api: api_pb2_grpc.DeterminedStub, batch_seq: int, batch: list[events_pb2.MetricReport], run_id: int = 1
) -> None:
    request = api_pb2.ReportMetricsRequest(
        trial_id=1, trial_run_id=run_id, batch_seq=batch_seq, reporter_id="p", reports=batch
    )
    await api.ReportMetrics(request, metadata=token_of(f"1.{run_id}"))


async def all_points(api: api_pb2_grpc.DeterminedStub, group: str = "") -> list[tuple[str, int, int]]:
    """(group, steps, run) of every point GetTrialMetrics streams, and how many responses it took."""
    points = []
    async for response in api.GetTrialMetrics(api_pb2.GetTrialMetricsRequest(trial_id=1, group=group)):
        assert 0 < len(response.points) <= METRICS_PAGE
        points += [(p.group, p.steps_completed, json.loads(p.metrics_json)["run"]) for p in response.points]
    return points


async def test_every_point_is_streamed_by_group_and_step_without_superseded_ones(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    for batch_seq, first in enumerate(range(1, 2501, 1000), start=1):
        await report(api, batch_seq, reports("training", range(first, min(first + 1000, 2501))))
    await report(api, 10, reports("validation", range(100, 2501, 100)) + reports("custom", [5]))
    await next_run(event_store, gateway, 1, 2, resumed_at=2000)  # points after 2000 of run 1 are superseded
    await report(
        api, 1, reports("training", range(2001, 2201), run_id=2) + reports("validation", [2100], 2), 2
    )
    assert await gateway.projector.catch_up()

    points = await all_points(api)
    expected = (
        [("custom", 5, 1)]
        + [("training", s, 1) for s in range(1, 2001)]
        + [("training", s, 2) for s in range(2001, 2201)]
        + [("validation", s, 1) for s in range(100, 2001, 100)]
        + [("validation", 2100, 2)]
    )
    assert points == expected
    assert await all_points(api, "validation") == [p for p in expected if p[0] == "validation"]
    assert await all_points(api, "training") == [p for p in expected if p[0] == "training"]
    assert await all_points(api, "nonesuch") == []
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await all_points_of(api, trial_id=9)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND


async def all_points_of(api: api_pb2_grpc.DeterminedStub, trial_id: int) -> None:
    async for _ in api.GetTrialMetrics(api_pb2.GetTrialMetricsRequest(trial_id=trial_id)):
        pass


async def upload(
    api: api_pb2_grpc.DeterminedStub, data: bytes, piece: int = 100_000, claimed: str | None = None
) -> api_pb2.UploadContextResponse:
    """Sends `data` in pieces, then the last request naming their hash
    (`claimed` instead, when given; "" sends no last request)."""

    async def requests() -> AsyncIterator[api_pb2.UploadContextRequest]:
        for start in range(0, len(data), piece):
            yield api_pb2.UploadContextRequest(chunk=data[start : start + piece])
        last = hashlib.sha256(data).hexdigest() if claimed is None else claimed
        if last:
            yield api_pb2.UploadContextRequest(context_hash=last)

    response: api_pb2.UploadContextResponse = await api.UploadContext(requests())
    return response


def refused_upload(port: int, data: bytes, piece: int = 100_000) -> grpc.RpcError:
    """The error of an upload the gateway refuses before its end, sent with the
    sync stub: grpc.aio's client can report its own failed send (INTERNAL)
    instead of the status the gateway ended the call with."""
    requests = (
        api_pb2.UploadContextRequest(chunk=data[start : start + piece])
        for start in range(0, len(data), piece)
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            api_pb2_grpc.DeterminedStub(channel).UploadContext(requests)
        except grpc.RpcError as error:
            return error
    raise AssertionError("the upload was not refused")


async def stored_context_messages(store: EventStore) -> int:
    info = await store.js.stream_info(f"OBJ_{store.contexts.bucket}")
    return int(info.state.messages)


async def test_an_uploaded_context_is_stored_once_named_by_its_hash_and_fetched_whole(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, tmp_path: Path
) -> None:
    data = os.urandom(3 * CONTEXT_CHUNK_BYTES + 12345)  # several stored chunks, sent in other sizes
    uploaded = await upload(api, data)
    assert (uploaded.context_hash, uploaded.size_bytes) == (hashlib.sha256(data).hexdigest(), len(data))
    messages = await stored_context_messages(event_store)
    assert (await upload(api, data, piece=777_777)).context_hash == uploaded.context_hash
    assert await stored_context_messages(event_store) == messages  # the same bytes are stored once

    request = api_pb2.CreateExperimentRequest(
        config_yaml=CONFIG, context_hash=uploaded.context_hash, activate=True, request_id="with-context"
    )
    created = await api.CreateExperiment(request)
    assert (await api.CreateExperiment(request)).experiment_id == created.experiment_id
    [event] = await stored(event_store, "experiment")
    assert (event.experiment_created.context_hash, event.experiment_created.context_size) == (
        uploaded.context_hash,
        len(data),
    )
    with (tmp_path / "fetched").open("w+b") as fetched:  # as the agent fetches it
        await event_store.contexts.fetch(uploaded.context_hash, fetched)
        fetched.seek(0)
        assert fetched.read() == data


async def test_a_packed_folder_goes_up_in_chunks_and_comes_back_identical(
    api: api_pb2_grpc.DeterminedStub, event_store: EventStore, tmp_path: Path
) -> None:
    folder = tmp_path / "model"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('hello')\n" * 1000)
    (folder / "data" / "weights.bin").write_bytes(os.urandom(2 * CONTEXT_CHUNK_BYTES))
    archive = b"".join(context_files(folder).archive_chunks(chunk_size=64 * 1024))
    uploaded = await upload(api, archive, piece=64 * 1024)
    with (tmp_path / "archive").open("w+b") as fetched:
        await event_store.contexts.fetch(uploaded.context_hash, fetched)
        extract_context(fetched, tmp_path / "out")
    for name in ("train.py", "data/weights.bin"):
        assert (tmp_path / "out" / name).read_bytes() == (folder / name).read_bytes()


async def test_bad_contexts_are_refused_and_leave_nothing(
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await upload(api, b"small")  # the bucket holds something already
    messages = await stored_context_messages(event_store)
    monkeypatch.setattr(experiment_commands, "MAX_CONTEXT_BYTES", CONTEXT_CHUNK_BYTES)
    error = await asyncio.to_thread(refused_upload, gateway.port, os.urandom(2 * CONTEXT_CHUNK_BYTES))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
    assert "more than" in error.details() and ".detignore" in error.details()
    data = os.urandom(CONTEXT_CHUNK_BYTES // 2)
    assert "cut short" in await refused(upload(api, data, claimed=""), grpc.StatusCode.INVALID_ARGUMENT)
    assert "damaged" in await refused(upload(api, data, claimed="ab" * 32), grpc.StatusCode.INVALID_ARGUMENT)
    assert await stored_context_messages(event_store) == messages

    create = api_pb2.CreateExperimentRequest(config_yaml=CONFIG, context_hash="ab" * 32)
    assert "upload it with UploadContext" in await refused(
        api.CreateExperiment(create), grpc.StatusCode.NOT_FOUND
    )
    create.context_hash = "not a hash"
    await refused(api.CreateExperiment(create), grpc.StatusCode.INVALID_ARGUMENT)
    create.context_tgz = b"tgz"
    assert "not both" in await refused(api.CreateExperiment(create), grpc.StatusCode.INVALID_ARGUMENT)
    assert await stored(event_store, "experiment") == []


async def test_commands_that_change_nothing_say_so_and_append_nothing(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    await given_trial(event_store, gateway)
    activate = await api.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=1))
    assert activate.unchanged_reason == "Experiment 1 is already ACTIVE: nothing to activate"
    assert (await api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=1))).unchanged_reason == ""
    await gateway.projector.catch_up()
    pause = await api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=1))
    assert pause.unchanged_reason == "Experiment 1 is already PAUSED: nothing to pause"

    ended = events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await append(event_store, gateway, "trial/1", ended, "ended-1")
    completed = events_pb2.ExperimentStateChanged(
        experiment_id=1, state=events_pb2.EXPERIMENT_STATE_COMPLETED
    )
    await append(event_store, gateway, "experiment/1", completed, "completed-1")
    before = len(await stored(event_store, "experiment")), len(await stored(event_store, "trial"))
    kill = await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1))
    assert kill.unchanged_reason == "Experiment 1 is already COMPLETED: nothing to kill"
    kill_trial = await api.KillTrial(api_pb2.KillTrialRequest(trial_id=1))
    assert kill_trial.unchanged_reason == "Trial 1 is already COMPLETED: nothing to kill"
    activate = await api.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=1))
    assert activate.unchanged_reason == "Experiment 1 is already COMPLETED: nothing to activate"
    assert (len(await stored(event_store, "experiment")), len(await stored(event_store, "trial"))) == before


async def det(gateway: Gateway, *argv: str, cwd: Path | None = None) -> tuple[int | None, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "determined.cli",
        "-m",
        f"127.0.0.1:{gateway.port}",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
    )
    out, error = await process.communicate()
    return process.returncode, out.decode(), error.decode()


async def test_the_cli_creates_with_an_uploaded_context_shows_metrics_and_no_change(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore, tmp_path: Path
) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "train.py").write_text("print('hi')\n")
    (tmp_path / "const.yaml").write_text(CONFIG)
    code, out, error = await det(gateway, "e", "create", "const.yaml", "model", cwd=tmp_path)
    assert code == 0 and out.splitlines()[-1] == "Created experiment 1", error
    [event] = await stored(event_store, "experiment")
    with io.BytesIO(await event_store.contexts.get(event.experiment_created.context_hash)) as archive:
        extract_context(archive, tmp_path / "out")
    assert (tmp_path / "out" / "train.py").read_text() == "print('hi')\n"

    await given_trial(event_store, gateway)
    await report(api, 1, reports("training", range(1, 1501)) + reports("validation", [1500]))
    assert await gateway.projector.catch_up()
    code, out, _ = await det(gateway, "t", "metrics", "1", "--csv")
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["group", "steps_completed", "reported_at", "run", "step"]
    assert (
        len(rows) == 1 + 1501 and rows[1][:2] == ["training", "1"] and rows[-1][:2] == ["validation", "1500"]
    )
    code, out, _ = await det(gateway, "t", "metrics", "1", "--group", "validation", "--json")
    assert [(p["group"], p["steps_completed"], p["metrics"]) for p in json.loads(out)] == [
        ("validation", 1500, {"step": 1500, "run": 1})
    ]

    await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1))
    assert await gateway.projector.catch_up()
    assert await det(gateway, "e", "kill", "1") == (
        0,
        "Experiment 1 is already STOPPING_KILLED: nothing to kill\n",
        "",
    )
    code, _, error = await det(gateway, "e", "kill", "99999999999999999999")
    assert code == 2 and "argument experiment_id: 99999999999999999999 is not an experiment id" in error
    assert "Traceback" not in error


class ChangingFiles:
    """Context files one of which turns out shorter while it is packed."""

    def archive_chunks(self) -> Iterator[bytes]:
        yield os.urandom(CONTEXT_CHUNK_BYTES)
        yield os.urandom(CONTEXT_CHUNK_BYTES)
        raise ContextError("data/weights.bin became shorter while it was packed; try again")


async def test_a_context_that_changes_while_it_is_uploaded_is_told_and_leaves_nothing(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await upload(api, b"small")  # the bucket holds something already
    messages = await stored_context_messages(event_store)
    client = CliGateway(f"127.0.0.1:{gateway.port}")
    with pytest.raises(CliError, match="changed while it was uploaded: data/weights.bin became shorter"):
        await asyncio.to_thread(upload_context, client, cast(ContextFiles, ChangingFiles()))

    async def nothing_left() -> bool:  # the gateway purges once it sees the cancel
        return await stored_context_messages(event_store) == messages

    await until(nothing_left, deadline_s=60.0)
