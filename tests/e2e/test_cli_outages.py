"""The CLI waits out a restarting gateway and a part of the cluster that is
down, for a bounded time, saying what it waits for (determined/cli/_waiting.py):
`det e list` while the gateway is stopped, `det e create` while nats-server is,
each answered once the part is back, and the experiment created once.

The cluster's CLI environment does not name its data folder (DET_DATA_DIR): the
CLI finds it from the running supervisor."""

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.e2e_cluster import Cluster, created_id, wait_for

pytestmark = pytest.mark.e2e

WAIT_S = "240"
CONFIG = json.dumps(
    {
        "name": "outage",
        "entrypoint": "python3 train.py",
        "hyperparameters": {},
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
)


def local(cluster: Cluster, *args: str) -> None:
    cluster.det("deploy", "local", *args, "--data-dir", str(cluster.data_dir))


@contextmanager
def stopped(cluster: Cluster, part: str) -> Iterator[None]:
    """`part` stopped for the block (started again however it ends)."""
    local(cluster, "stop-service", part)
    try:
        yield
    finally:
        local(cluster, "start-service", part)


def det_waiting(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    """`det args` started, waiting out outages for up to WAIT_S."""
    env = dict(cluster.env, DET_CLI_WAIT_S=WAIT_S)
    return subprocess.Popen(
        [sys.executable, "-m", "determined.cli", *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finished(command: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = command.communicate(timeout=300)
    return command.returncode, out, err


def experiment_ids(cluster: Cluster) -> set[int]:
    return {int(experiment["id"]) for experiment in cluster.json("experiment", "list")}


def test_a_listing_waits_for_a_restarting_gateway(cluster: Cluster) -> None:
    with stopped(cluster, "gateway"):
        listing = det_waiting(cluster, "experiment", "list")
        assert listing.stderr is not None
        said = listing.stderr.readline()  # the first line it writes: it waits now
        assert said == (
            f"the master at {cluster.env['DET_MASTER']} is not answering: the gateway is down "
            f"(stopped); waiting up to {WAIT_S} s\n"
        ), said + listing.stderr.read()
    code, out, err = finished(listing)
    assert code == 0, err
    assert out.split(" | ", 1)[0].strip() == "ID"
    assert err == ""  # one line said it waited; nothing more


def test_a_create_waits_for_the_event_log_and_creates_one_experiment(
    cluster: Cluster, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('never run: the experiment stays paused')\n")
    (tmp_path / "config.yaml").write_text(CONFIG)
    before = experiment_ids(cluster)
    with stopped(cluster, "nats-server"):
        create = det_waiting(
            cluster, "experiment", "create", "--paused", str(tmp_path / "config.yaml"), str(tmp_path)
        )
        assert create.stderr is not None
        said = create.stderr.readline()
        assert said == f"the cluster's event log (nats-server) is down; waiting up to {WAIT_S} s\n", (
            said + create.stderr.read()
        )
    code, out, err = finished(create)
    assert code == 0, err
    experiment_id = created_id(out)
    # A second experiment from a repeated request would have been stored before the one answered.
    new = wait_for(lambda: experiment_ids(cluster) - before, "the experiment in the listing")
    assert new == {experiment_id}
    cluster.det("experiment", "kill", str(experiment_id))
