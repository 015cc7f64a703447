"""Finding 1 of issue 17: one malformed event stopped the cluster for good.

Against a real local cluster, each part's NATS user (the passwords in
<data dir>/credentials.json; the agent's is also in cluster.secret, which
every remote agent holds) publishes poison straight to JetStream, bypassing
our client, on subjects that user may publish on: bytes that are no event,
`{}`, a known type with garbage (an aggregate its payload does not name), a
type this code does not know, a payload near nats-server's max_payload.
Afterwards every part still runs (none restarted), an experiment created
afterwards runs to completion and `det e describe` shows it, the gateway's
/health says its projector is caught up and names what it skipped, `det
deploy local status` names the skipped sequences, and parts restarted (the
gateway, the scheduler, then the whole cluster down and up) go on past it."""

import asyncio
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.e2e_cluster import Cluster, created_id, started_cluster, wait_for

from deploy.local.credentials import credentials
from determined.proto import events_pb2
from services.common.connection import Connection
from services.common.envelope import Append, Envelope, wrap
from services.common.eventstore import EventStore

pytestmark = pytest.mark.e2e

# Per part: one aggregate kind it appends (deploy/local/credentials.py APPENDS), so
# that its user may publish there however narrowly its permissions are drawn.
PART_KINDS = {
    "gateway": "experiment",
    "searcher": "trial",
    "scheduler": "allocation",
    "checkpoint": "checkpoint",
    "agent": "allocation",
}

CONFIG = textwrap.dedent(
    """
    name: after-poison
    entrypoint: python3 -c "print('ran after the poison')"
    searcher:
      name: single
      metric: loss
      max_length:
        batches: 1
    max_restarts: 0
    """
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-poison") as running:
        yield running


def poison(kind: str, part: str, max_payload: int) -> list[tuple[str, bytes]]:
    """(aggregate id, bytes) of each poison a part's user publishes on `kind`."""
    garbage_of_known_type = wrap(
        Append(f"{kind}/{part}-2", events_pb2.TrialEnded(trial_id=12345, reason="\x00" * 100), f"p-{part}"),
        actor="mallory",
        occurred_at_ns=1,
    )
    unknown_type = (
        b"\xba\x3e\x04\x08\x01\x10\x02"
        + Envelope(event_id="u", aggregate=f"{kind}/{part}-4").SerializeToString()
    )
    return [
        (f"{part}-0", b"\xff\xfe not protobuf \x00"),
        (f"{part}-1", b"{}"),
        (f"{part}-2", garbage_of_known_type.SerializeToString()),
        (f"{part}-4", unknown_type),
        (f"{part}-5", b"\x0a" + b"\xff" * (max_payload - 64 * 1024)),
    ]


async def publish_as(cluster: Cluster, user: str, kind: str, part: str) -> list[int]:
    """Publishes the poison as `user`; the sequences JetStream stored it at."""
    connection = await Connection.open(
        f"nats://127.0.0.1:{cluster.nats_port}", f"poison-{part}", cluster.nats_login(user)
    )
    store = EventStore(connection, "det")
    try:
        sequences = []
        for aggregate_id, data in poison(kind, part, store.nc.max_payload):
            ack = await store.js.publish(
                f"det.events.{kind}.{aggregate_id}", data, stream=store.events_stream
            )
            sequences.append(ack.seq)
        return sequences
    finally:
        await store.close()


def agent_user(cluster: Cluster) -> str:
    """The agents' NATS user: `agent`, or an agent's own where each has one."""
    users = credentials(cluster.data_dir).nats
    return "agent" if "agent" in users else next(name for name in users if name.startswith("agent"))


def part_restarts(cluster: Cluster) -> dict[str, tuple[str, int]]:
    parts = json.loads(
        cluster.det("deploy", "local", "status", "--data-dir", str(cluster.data_dir), "--json").stdout
    )
    return {part["name"]: (part["state"], part["restarts"]) for part in parts["parts"]}


@pytest.fixture(scope="module")
def poisoned(cluster: Cluster) -> list[int]:
    """The sequences of the poison every part's user published (after checking
    that every part runs); the parts' restart counts are then as before."""
    assert all(state == "running" for state, _ in part_restarts(cluster).values())
    sequences: list[int] = []
    for part, kind in PART_KINDS.items():
        user = agent_user(cluster) if part == "agent" else part
        sequences += asyncio.run(publish_as(cluster, user, kind, part))
    return sequences


def test_after_the_poison_every_part_runs_and_an_experiment_completes(
    cluster: Cluster, poisoned: list[int], tmp_path: Path
) -> None:
    before = part_restarts(cluster)
    experiment_id = create(cluster, tmp_path)
    assert "ran after the poison" in cluster.logs(cluster.trials(experiment_id)[0]["id"])
    assert cluster.json("experiment", "describe", str(experiment_id))["experiment"]["name"] == "after-poison"
    assert part_restarts(cluster) == before, "a part stopped or restarted"


def test_health_and_status_name_the_skipped_sequences(cluster: Cluster, poisoned: list[int]) -> None:
    health = httpx.get(
        f"http://127.0.0.1:{cluster.master_port + 1}/health", timeout=10
    ).json()  # the HTTP API
    assert health["status"] == "ok" and health["projector"]["state"] in ("caught up", "behind"), health
    assert health["skippedEvents"]["count"] >= len(poisoned)
    assert poisoned[-1] in {entry["sequence"] for entry in health["skippedEvents"]["latest"]}
    status = wait_for(
        lambda: named_in_status(cluster, poisoned[-1]), "status to name the skipped sequence", 30
    )
    assert "not an event envelope" in status
    for part in ("searcher", "scheduler", "agent", "checkpoint"):
        assert f"{part}: skipped" in status, status


def test_parts_restart_and_the_cluster_comes_up_again_past_the_poison(
    cluster: Cluster, poisoned: list[int], tmp_path: Path
) -> None:
    for part in ("gateway", "scheduler"):
        cluster.det("deploy", "local", "restart-service", part, "--data-dir", str(cluster.data_dir))
    assert cluster.down().returncode == 0
    started = cluster.up()
    assert started.returncode == 0, started.stdout + started.stderr
    create(cluster, tmp_path)
    wait_for(lambda: named_in_status(cluster, poisoned[-1]), "status to name the skipped sequence again", 30)


def create(cluster: Cluster, folder: Path) -> int:
    """Creates the experiment of CONFIG and waits for it to complete."""
    (folder / "config.yaml").write_text(CONFIG)
    experiment_id = created_id(
        cluster.det("experiment", "create", str(folder / "config.yaml"), str(folder)).stdout
    )
    wait_for(lambda: cluster.experiment_state(experiment_id) == "COMPLETED", "the experiment", 120)
    return experiment_id


def named_in_status(cluster: Cluster, sequence: int) -> str:
    """What `det deploy local status` shows once the gateway's report names
    `sequence` and says its read models caught up with the log ("" before)."""
    shown = cluster.det("deploy", "local", "status", "--data-dir", str(cluster.data_dir)).stdout
    named = f"({sequence} on det.events." in shown and "gateway: read models caught up" in shown
    return shown if named else ""
