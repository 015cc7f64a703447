"""Finding 2 of issue 17: trial code read every secret of the cluster.

Against a real local cluster started as root (as CI runs it; with
--fork-trials, so that both ways a trial starts are tried): a trial of the
non-admin mallory tries to read the data folder's secrets by relative and
absolute paths, the event log, the logs, the run files and the
/proc/<pid>/environ of every part, and prints its own environment. Every read
is refused, the trial runs as another OS user than the services, and no
secret of the cluster appears in its logs. A config near the config size
limit (once an "Argument list too long" at every trial's start) runs."""

import json
import os
import pwd
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import attacker
from support.e2e_cluster import Cluster, created_id, started_cluster, wait_for

from deploy.local.cluster import ClusterRecord, default_checkpoints
from deploy.local.credentials import credentials
from deploy.local.trial_home import DEFAULT_TRIAL_USER
from determined.common.expconf import MAX_CONFIG_BYTES

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="trials switch users only as root"),
]

PARTS = ("nats-server", "postgres", "gateway", "searcher", "scheduler", "agent")

ATTACK_PY = textwrap.dedent(
    """
    import json, os, sys

    targets = json.loads(sys.argv[1])
    for name, path in targets.items():
        try:
            if os.path.isdir(path):
                found = os.listdir(path)
                for entry in found:
                    inner = os.path.join(path, entry)
                    if os.path.isfile(inner):
                        open(inner, "rb").read(64)
            else:
                open(path, "rb").read()
            print("READ", name, path, flush=True)
        except OSError as error:
            print("REFUSED", name, type(error).__name__, flush=True)
    print("UID", os.getuid(), flush=True)
    print("ENVIRONMENT", json.dumps(dict(os.environ)), flush=True)
    """
)

BIG_PY = textwrap.dedent(
    """
    import determined as det

    info = det.get_cluster_info()
    print("blob of", len(info.user_data["blob"]), "characters", flush=True)
    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "weights.txt").write_text("w")
    """
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-isolation", ["--fork-trials"]) as running:
        yield running


# mallory, the attacker (tests/support/attacker.py), on this module's cluster.
mallory = attacker.mallory
mallory_password = attacker.mallory_password


def targets(cluster: Cluster) -> dict[str, str]:
    """What mallory's trial tries to read: the data folder's secrets (relative to its
    folder, at every depth, and absolute), its private folders, every part's environment."""
    data = cluster.data_dir
    found = {
        f"up {depth}: {name}": "../" * depth + name
        for depth in range(1, 7)
        for name in ("cluster.secret", "credentials.json")
    }
    found.update(
        {
            "cluster.secret": str(data / "cluster.secret"),
            "credentials.json": str(data / "credentials.json"),
            "the event log": str(data / "nats"),
            "the logs": str(data / "logs"),
            "the run files": str(data / "run"),
            "cluster.json": str(data / "run" / "cluster.json"),
            "the database": str(ClusterRecord.load(data).postgres_folder(data)),  # type: ignore[union-attr]
        }
    )
    for part in PARTS:
        found[f"the environment of {part}"] = f"/proc/{part_pid(data, part)}/environ"
    return found


def part_pid(data_dir: Path, name: str) -> int:
    status = json.loads((data_dir / "run" / "status.json").read_text())
    return int(next(part["pid"] for part in status["parts"] if part["name"] == name))


def secrets_of(cluster: Cluster) -> list[str]:
    """Every secret value of the cluster: the token secret, each password."""
    identity = json.loads((cluster.data_dir / "cluster.secret").read_text())
    found = credentials(cluster.data_dir)
    return [identity["secret"], found.postgres_password, *(user.password for user in found.nats.values())]


def finished_trial(her: Cluster, context: Path, config: dict[str, Any]) -> tuple[int, str]:
    (context / "config.yaml").write_text(json.dumps(config))
    created = her.det("experiment", "create", str(context / "config.yaml"), str(context))
    experiment_id = created_id(created.stdout)
    wait_for(
        lambda: her.experiment_state(experiment_id) in ("COMPLETED", "ERROR"), "the experiment to end", 180
    )
    [trial] = her.trials(experiment_id)
    assert her.experiment_state(experiment_id) == "COMPLETED", her.logs(trial["id"])
    return trial["id"], her.logs(trial["id"])


@pytest.mark.parametrize(
    "entrypoint", ["python3 attack.py", "env python3 attack.py"], ids=["forked", "plain"]
)
def test_mallorys_trial_reads_no_secret(
    cluster: Cluster, mallory: Cluster, tmp_path: Path, entrypoint: str
) -> None:
    (tmp_path / "attack.py").write_text(ATTACK_PY)
    config = {
        "name": "attack",
        "entrypoint": f"{entrypoint} '{json.dumps(targets(cluster))}'"
        if "env" in entrypoint
        else [*entrypoint.split(), json.dumps(targets(cluster))],
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
    trial_id, logs = finished_trial(mallory, tmp_path, config)
    started = [
        line
        for line in (cluster.data_dir / "logs" / "agent.log").read_text().splitlines()
        if "allocation_started" in line and f"allocation_id={trial_id}." in line
    ]
    assert started and all(f"forked={entrypoint.startswith('python3')}" in line for line in started), started

    read = [line for line in logs.splitlines() if "READ " in line]
    assert read == [], logs
    refused = [line for line in logs.splitlines() if "REFUSED " in line]
    assert len(refused) == len(targets(cluster)), logs
    uid = int(next(line for line in logs.splitlines() if "UID " in line).rsplit(" ", 1)[1])
    assert uid == pwd.getpwnam(DEFAULT_TRIAL_USER).pw_uid != os.geteuid()
    shown = next(line for line in logs.splitlines() if "ENVIRONMENT " in line)
    environment = json.loads(shown.split("ENVIRONMENT ", 1)[1])
    assert not {"DET_CLUSTER_SECRET", "DET_NATS_PASSWORD", "DET_NATS_USER", "DET_DATABASE_URL"} & set(
        environment
    )
    assert environment["HOME"] != os.environ.get("HOME")
    leaked = [secret for secret in secrets_of(cluster) if secret in logs]
    assert leaked == [], "a secret of the cluster is in the trial's logs"


def test_a_config_near_the_size_limit_runs(cluster: Cluster, tmp_path: Path) -> None:
    """Over 128 KiB the config no longer fits in one environment variable: it is in a file.
    The (forked) trial, as the trial user, writes a checkpoint to the default storage."""
    (tmp_path / "big.py").write_text(BIG_PY)
    blob = "x" * (MAX_CONFIG_BYTES - 4096)
    config = {
        "name": "big",
        "entrypoint": "python3 big.py",
        "data": {"blob": blob},
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "max_restarts": 0,
    }
    trial_id, logs = finished_trial(cluster, tmp_path, config)
    assert f"blob of {len(blob)} characters" in logs
    [checkpoint] = cluster.json("trial", "list-checkpoints", str(trial_id))
    stored = default_checkpoints(cluster.data_dir, {})
    assert (stored / checkpoint["uuid"] / "weights.txt").stat().st_uid == pwd.getpwnam(
        DEFAULT_TRIAL_USER
    ).pw_uid
