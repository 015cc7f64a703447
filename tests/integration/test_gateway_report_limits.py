"""Reports too large for the event log, against a real gateway on a real nats-server whose
max_payload is small (128 KiB, as an operator might set it; NATS's default is 1 MB): the gateway
refuses such a batch whole with INVALID_ARGUMENT naming the limit, before storing anything; the
harness's sender splits it so that the other reports land, each exactly once, and drops the one
report that cannot be stored with an error naming it."""

import asyncio
import functools
import json
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from test_gateway import SECRET, given_trial, stored, trial_metadata
from test_gateway_stop_resume import refused

from deploy.local.servers import free_port, nats_server_binary, wait_for_port
from determined import _client
from determined._client import MetricRecord, TrialClient
from determined.core._errors import ReportError
from determined.core._metrics import MetricsShipper
from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.eventstore import EventStore
from services.gateway.server import Gateway
from services.gateway.settings import GatewaySettings

MAX_PAYLOAD = 128 * 1024


@pytest.fixture(scope="module")
def small_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A nats-server of its own (the session's has max_payload 8 MB)."""
    folder = tmp_path_factory.mktemp("small-nats")
    port = free_port()
    config = folder / "nats-server.conf"
    config.write_text(
        f'listen: 127.0.0.1:{port}\nmax_payload: {MAX_PAYLOAD}\njetstream {{ store_dir: "{folder}" }}\n'
    )
    with open(folder / "nats.log", "ab") as log:
        process = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    assert wait_for_port(port, 10.0, process), (folder / "nats.log").read_text()
    yield f"nats://127.0.0.1:{port}"
    process.terminate()
    process.wait(10)


@pytest.fixture
async def store(small_nats: str, namespace: str) -> AsyncIterator[EventStore]:
    opened = await EventStore.connect(small_nats, namespace)
    yield opened
    await opened.close()


@pytest.fixture
async def gateway(
    small_nats: str, namespace: str, database_url: str, store: EventStore
) -> AsyncIterator[Gateway]:
    settings = GatewaySettings(
        nats_url=small_nats,
        namespace=namespace,
        database_url=database_url,
        gateway_port=free_port(),
        gateway_host="127.0.0.1",
        cluster_secret=SECRET,
        cluster_id="test-cluster",
        grace_period_s=0.1,
        allow_anonymous=True,
        allow_blank_password=True,
    )
    started = await Gateway.start(settings)
    yield started
    await started.stop()


def report(step: int, metrics: dict[str, object], group: str = "training") -> MetricRecord:
    return MetricRecord(group, step, json.dumps(metrics), step)


async def test_an_oversized_batch_is_refused_naming_the_limit_and_its_other_reports_land_once(
    gateway: Gateway, store: EventStore
) -> None:
    await given_trial(store, gateway)
    big = "x" * (150 * 1024)  # under the harness's 1 MiB per report, over this event log's limit

    # The gateway's answer: INVALID_ARGUMENT naming the size and the limit; nothing stored.
    request = api_pb2.ReportMetricsRequest(
        trial_id=1,
        trial_run_id=1,
        batch_seq=1,
        reporter_id="p",
        reports=[
            events_pb2.MetricReport(group="validation", steps_completed=1, metrics_json='{"loss": 1}'),
            events_pb2.MetricReport(
                group="training", steps_completed=2, metrics_json=json.dumps({"blob": big})
            ),
        ],
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        details = await refused(
            api.ReportMetrics(request, metadata=trial_metadata(1)), grpc.StatusCode.INVALID_ARGUMENT
        )
    assert details.startswith("metrics batch 1 is too large for the event log: 153")
    assert f"at most {MAX_PAYLOAD - 4096} (nats-server's max_payload of {MAX_PAYLOAD} bytes" in details
    assert await stored(store, "metrics") == [] and await stored(store, "validation") == []

    # The harness's sender: one batch of five reports, refused, split; the big one dropped.
    token = trial_metadata(1)[0][1]
    client = TrialClient(f"127.0.0.1:{gateway.port}", token, retry_for_s=10)
    held, holding = threading.Event(), threading.Event()

    def send(batch_seq: int, part: str, records: list[MetricRecord]) -> None:
        holding.set()
        held.wait()  # the first batch waits until the others are queued: they go as one
        client.report_metrics(1, 1, batch_seq, part, records)

    shipper = MetricsShipper(send)
    shipper.start()
    shipper.put(report(0, {"loss": 0.0}))
    await asyncio.to_thread(holding.wait)
    for record in [
        report(1, {"loss": 1.0}),
        report(2, {"validation_loss": 0.5}, "validation"),
        report(3, {"loss": 3.0, "blob": big}),
        report(4, {"loss": 4.0}),
        report(5, {"loss": 5.0}),
    ]:
        shipper.put(record)
    held.set()
    with pytest.raises(
        ReportError, match=r"the training report at steps_completed=3 \(153\d+ bytes of JSON\)"
    ):
        await asyncio.to_thread(shipper.close)

    metrics = [e.trial_metrics_reported for e in await stored(store, "metrics")]
    assert [r.steps_completed for m in metrics for r in m.reports] == [0, 1, 4, 5]
    [validation] = [e.trial_validation_reported for e in await stored(store, "validation")]
    assert validation.steps_completed == 2

    # A part sent again (a retry after a lost reply or a gateway restart) is stored once.
    part = _client.part_reporter(_client.REPORTER_ID, "11")
    [event_id] = [e.event_id for e in await stored(store, "metrics") if f"-{part}-" in e.event_id]
    batch_seq = int(event_id.rsplit("-", 1)[1])
    resend = functools.partial(
        client.report_metrics, 1, 1, batch_seq, "11", [report(4, {"loss": 4.0}), report(5, {"loss": 5.0})]
    )
    await asyncio.to_thread(resend)
    assert [e.event_id for e in await stored(store, "metrics")].count(event_id) == 1
    assert len(await stored(store, "metrics")) == 3
    client.close()


async def test_a_checkpoint_report_too_large_is_refused_naming_the_limit(
    gateway: Gateway, store: EventStore
) -> None:
    await given_trial(store, gateway)
    metadata_json = json.dumps({"steps_completed": 1, "notes": "n" * (150 * 1024)})
    request = api_pb2.ReportCheckpointRequest(
        uuid="c-1", trial_id=1, allocation_id="1.1", steps_completed=1, metadata_json=metadata_json
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{gateway.port}") as channel:
        api = api_pb2_grpc.DeterminedStub(channel)
        details = await refused(
            api.ReportCheckpoint(request, metadata=trial_metadata(1)), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert details.startswith("the report of checkpoint c-1 is too large for the event log")
        assert await stored(store, "checkpoint") == []
        request.metadata_json = '{"steps_completed": 1}'
        await api.ReportCheckpoint(request, metadata=trial_metadata(1))  # the connection to NATS is intact
    assert len(await stored(store, "checkpoint")) == 1
