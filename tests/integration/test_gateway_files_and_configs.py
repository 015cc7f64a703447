"""Against a real gateway (nats-server, PostgreSQL, a shared_fs folder): a checkpoint's
files are served only when safely inside the checkpoint (no symbolic link, no hard link),
by the HTTP route and by DownloadCheckpointFile; ReportCheckpoint refuses names outside a
checkpoint; configs past the limits are refused naming the limit, and a large config is
validated off the event loop while other calls are answered."""

import asyncio
import contextlib
import os
import zlib
from pathlib import Path

import grpc
import httpx
import pytest
import test_http_api
from test_gateway import trial_metadata
from test_gateway_stop_resume import refused

from determined.common import expconf
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

# test_http_api's gateway (gRPC and HTTP), its client and the admin's token.
gateway = test_http_api.gateway
token = test_http_api.token

PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT
CONFIG = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
"""


def as_admin(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def with_trial(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, store: EventStore, token: str, storage: Path
) -> None:
    """Experiment 1 on shared_fs `storage`, with trial 1 (allocation 1.1 requested)."""
    config = CONFIG + f"checkpoint_storage: {{type: shared_fs, host_path: {storage}}}\n"
    await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(config_yaml=config, activate=True), metadata=as_admin(token)
    )
    await store.append(
        Append("trial/1", events_pb2.TrialCreated(trial_id=1, experiment_id=1, hparams_json="{}"), "trial-1"),
        actor="service:searcher",
    )
    launch = events_pb2.TrialLaunch(experiment_id=1, trial_id=1, trial_run_id=1)
    requested = events_pb2.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", trial=launch
    )
    await store.append(
        Append("allocation/1.1", requested, "allocation-requested-1.1"), actor="service:searcher"
    )
    assert await gateway.projector.catch_up()


async def report(api: api_pb2_grpc.DeterminedStub, uuid: str, resources: dict[str, int]) -> None:
    request = api_pb2.ReportCheckpointRequest(
        uuid=uuid, trial_id=1, allocation_id="1.1", steps_completed=10, resources=resources
    )
    await api.ReportCheckpoint(request, metadata=trial_metadata(1))


async def download(api: api_pb2_grpc.DeterminedStub, token: str, uuid: str, path: str) -> bytes:
    data = b""
    request = api_pb2.DownloadCheckpointFileRequest(uuid=uuid, path=path)
    async for response in api.DownloadCheckpointFile(request, metadata=as_admin(token)):
        data += response.data
    return data


async def archived(http: httpx.AsyncClient, uuid: str, headers: dict[str, str]) -> bytes:
    """What GET /checkpoints/{uuid} sends, unpacked, up to where it stops (a refused file ends it)."""
    received = bytearray()
    with contextlib.suppress(httpx.HTTPError):
        async with http.stream("GET", f"/checkpoints/{uuid}", headers=headers) as answer:
            async for chunk in answer.aiter_raw():
                received += chunk
    return zlib.decompressobj(wbits=31).decompress(bytes(received))


async def test_files_that_lead_outside_a_checkpoint_are_refused(
    http: httpx.AsyncClient,
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    token: str,
    tmp_path: Path,
) -> None:
    storage, data = tmp_path / "checkpoints", tmp_path / "data"
    (storage / "c-1").mkdir(parents=True)
    data.mkdir()
    secret = data / "cluster.secret"
    secret.write_bytes(b"the cluster's secret")
    (storage / "c-1" / "model.pt").write_bytes(b"weights")
    (storage / "c-1" / "leak").symlink_to(secret)
    (storage / "c-1" / "config").symlink_to(data)
    os.link(secret, storage / "c-1" / "copy")
    (storage / "c-2").symlink_to(data)  # a checkpoint folder that is itself a link
    await with_trial(api, gateway, event_store, token, storage)
    size = len(b"the cluster's secret")
    await report(
        api, "c-1", {"model.pt": 7, "leak": size, "config/": 0, "config/cluster.secret": size, "copy": size}
    )
    await report(api, "c-2", {"cluster.secret": size})
    assert await gateway.projector.catch_up()

    headers = test_http_api.bearer(token)
    served = await http.get("/api/v1/checkpoints/c-1/files/model.pt", headers=headers)
    assert served.status_code == 200 and served.content == b"weights"
    assert await download(api, token, "c-1", "model.pt") == b"weights"
    for uuid, path, why in (
        ("c-1", "leak", "leak is a symbolic link"),
        ("c-1", "config/cluster.secret", "config is a symbolic link"),
        ("c-1", "copy", "it has 2 hard links"),
        ("c-2", "cluster.secret", "its folder is a symbolic link"),
    ):
        answer = await http.get(f"/api/v1/checkpoints/{uuid}/files/{path}", headers=headers)
        assert answer.status_code == 403, (path, answer.text)
        assert f"file {path!r} of checkpoint {uuid} is refused: {why}" in answer.json()["message"]
        assert b"the cluster's secret" not in answer.content
        assert why in await refused(download(api, token, uuid, path), PERMISSION_DENIED)
    # The whole checkpoint as a .tar.gz (Determined's GET /checkpoints/{uuid}): a refused file ends it.
    assert (await http.get("/checkpoints/c-2", headers=headers)).status_code == 403
    assert b"the cluster's secret" not in await archived(http, "c-1", headers)


@pytest.mark.parametrize(
    ("uuid", "name", "expected"),
    [
        ("c-1", "../../cluster.secret", "lists the file '../../cluster.secret'"),
        ("c-1", "/etc/passwd", "'/etc/passwd': not a path inside a checkpoint: '/etc/passwd' is absolute"),
        ("c-1", "", "lists the file '': not a path inside a checkpoint: '' is empty"),
        ("c-1", "a//b", "empty, '.' or '..' component"),
        ("../c-1", "model.pt", "checkpoint uuid '../c-1' cannot name a checkpoint's folder"),
    ],
)
async def test_report_checkpoint_refuses_names_outside_a_checkpoint(
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    token: str,
    tmp_path: Path,
    uuid: str,
    name: str,
    expected: str,
) -> None:
    await with_trial(api, gateway, event_store, token, tmp_path)
    before = await event_store.last_sequence()
    assert expected in await refused(report(api, uuid, {"model.pt": 1, name: 1}), INVALID_ARGUMENT)
    assert await event_store.last_sequence() == before  # nothing stored


async def create(
    api: api_pb2_grpc.DeterminedStub, token: str, config: str
) -> api_pb2.CreateExperimentResponse:
    request = api_pb2.CreateExperimentRequest(config_yaml=config, validate_only=True)
    return await api.CreateExperiment(request, metadata=as_admin(token))


async def test_configs_past_the_limits_are_refused_naming_them(
    api: api_pb2_grpc.DeterminedStub, token: str
) -> None:
    levels = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    levels += [f"a{n}: &a{n} [" + ",".join([f"*a{n - 1}"] * 9) + "]" for n in range(1, 9)]
    bomb = CONFIG + "data:\n" + "".join(f"  {line}\n" for line in levels)
    message = await refused(create(api, token, bomb), INVALID_ARGUMENT)
    assert f"holds more than {expconf.MAX_CONFIG_VALUES} values" in message
    large = CONFIG + "description: '" + "x" * (50 * 1024 * 1024) + "'\n"
    message = await refused(create(api, token, large), INVALID_ARGUMENT)
    assert f"at most 1.0 MiB ({expconf.MAX_CONFIG_BYTES} bytes) is allowed" in message
    deep = CONFIG + "data: " + "[" * 1000 + "]" * 1000 + "\n"
    assert f"more than {expconf.MAX_CONFIG_DEPTH} levels deep" in await refused(
        create(api, token, deep), INVALID_ARGUMENT
    )


async def test_a_large_config_does_not_stop_other_calls(api: api_pb2_grpc.DeterminedStub, token: str) -> None:
    """A config near the limits takes a while to validate: meanwhile the gateway answers."""
    entries = "".join(f"  key{index}: [value, {index}]\n" for index in range(38_000))
    config = CONFIG + "data:\n" + entries
    assert len(config.encode()) < expconf.MAX_CONFIG_BYTES
    creating = asyncio.create_task(create(api, token, config))
    answered_meanwhile = 0
    while not creating.done():
        await api.GetExperiments(api_pb2.GetExperimentsRequest(), metadata=as_admin(token))
        answered_meanwhile += 0 if creating.done() else 1
    assert (await creating).config_json
    assert answered_meanwhile > 0  # none when the config is validated on the event loop
