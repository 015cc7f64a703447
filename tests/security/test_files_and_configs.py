"""Findings 4 and 5 of issue 17, replayed on a real local cluster as the non-admin mallory.

4. The gateway followed symlinks out of checkpoint storage: mallory's trial leaves
   `leak -> <data dir>/cluster.secret` (and a folder link to the data folder) in its
   checkpoint; the checkpoint file route and `det checkpoint download` (direct from the
   storage and through the master) refuse them, naming the file, and the secret is never
   served or copied.
5. A 594-byte YAML alias bomb took the gateway to 5.8 GB, a 50 MB config blocked it for
   88 s: `det e create` refuses both (and deep nesting, and 10^6 categorical values) with
   the limit named, the gateway refuses them too when the CLI is bypassed, and
   `det e list` answers throughout."""

import itertools
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import attacker
from support.e2e_cluster import Cluster, created_id, started_cluster, wait_for

from determined.common import expconf

pytestmark = pytest.mark.e2e

LEAKY_TRAIN_PY = textwrap.dedent(
    """
    import os, sys
    import determined as det

    data_dir = sys.argv[1]
    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 1}) as (path, storage_id):
            (path / "model.pt").write_bytes(b"weights")
            os.symlink(os.path.join(data_dir, "cluster.secret"), path / "leak")
            os.symlink(data_dir, path / "data")
        print("checkpoint", storage_id, flush=True)
    """
)
CHECKPOINT_LINE = re.compile(r"checkpoint ([0-9a-f-]{36})")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with started_cluster("det-files-configs") as running:
        yield running


# mallory, the attacker (tests/support/attacker.py), on this module's cluster.
mallory = attacker.mallory
mallory_password = attacker.mallory_password


@pytest.fixture(scope="module")
def web(cluster: Cluster, mallory: Cluster, mallory_password: str) -> Iterator[httpx.Client]:
    """The HTTP API with mallory's token."""
    with httpx.Client(base_url=f"http://localhost:{cluster.master_port + 1}", timeout=60) as client:
        login = client.post("/api/v1/auth/login", json={"username": "mallory", "password": mallory_password})
        assert login.status_code == 200, login.text
        client.headers["authorization"] = f"Bearer {login.json()['token']}"
        yield client


@pytest.fixture(scope="module")
def leaky_checkpoint(cluster: Cluster, mallory: Cluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The uuid of the checkpoint mallory's trial wrote with links to the data folder."""
    context = tmp_path_factory.mktemp("leaky")
    (context / "train.py").write_text(LEAKY_TRAIN_PY)
    config = {
        "name": "leaky",
        "entrypoint": ["python3", "train.py", str(cluster.data_dir)],
        "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(cluster.storage_folder("leaky"))},
        "max_restarts": 0,
    }
    (context / "config.yaml").write_text(json.dumps(config))
    experiment_id = created_id(
        mallory.det("experiment", "create", str(context / "config.yaml"), str(context)).stdout
    )
    wait_for(
        lambda: mallory.experiment_state(experiment_id) in ("COMPLETED", "ERROR"),
        "the experiment to end",
        180,
    )
    [trial] = mallory.trials(experiment_id)
    logs = mallory.logs(trial["id"])
    assert mallory.experiment_state(experiment_id) == "COMPLETED", logs
    found = CHECKPOINT_LINE.search(logs)
    assert found, logs
    return found.group(1)


def secret_of(cluster: Cluster) -> bytes:
    return bytes((cluster.data_dir / "cluster.secret").read_bytes())


def test_the_checkpoint_file_route_refuses_links(
    cluster: Cluster, web: httpx.Client, leaky_checkpoint: str
) -> None:
    served = web.get(f"/api/v1/checkpoints/{leaky_checkpoint}/files/model.pt")
    assert served.status_code == 200 and served.content == b"weights"
    answer = web.get(f"/api/v1/checkpoints/{leaky_checkpoint}/files/leak")
    assert answer.status_code == 403, answer.text
    assert (
        f"file 'leak' of checkpoint {leaky_checkpoint} is refused: leak is a symbolic link"
        in answer.json()["message"]
    )
    assert secret_of(cluster) not in answer.content
    through_folder = web.get(f"/api/v1/checkpoints/{leaky_checkpoint}/files/data/cluster.secret")
    assert through_folder.status_code in (403, 404) and secret_of(cluster) not in through_folder.content


@pytest.mark.parametrize("mode", ["auto", "direct", "master"])
def test_checkpoint_download_refuses_links(
    cluster: Cluster, mallory: Cluster, leaky_checkpoint: str, tmp_path: Path, mode: str
) -> None:
    target = tmp_path / "out"
    result = mallory.det(
        "checkpoint", "download", leaky_checkpoint, "-o", str(target), "--mode", mode, check=False
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert (
        f"file 'leak' of checkpoint {leaky_checkpoint} is refused: leak is a symbolic link" in result.stderr
    )
    copied = (
        [path for path in target.rglob("*") if path.is_file() or path.is_symlink()] if target.exists() else []
    )
    assert all(secret_of(cluster) not in path.read_bytes() for path in copied if path.is_file())
    assert not any(path.is_symlink() for path in copied)


def alias_bomb() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    names = "abcdefghi"
    for before, name in itertools.pairwise(names):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{before}"] * 9) + "]")
    return "\n".join(lines) + "\n"


BASE = "entrypoint: python3 train.py\nsearcher: {name: grid, metric: loss, max_length: {batches: 1}}\n"


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "alias bomb",
            BASE + "data:\n" + textwrap.indent(alias_bomb(), "  "),
            f"more than {expconf.MAX_CONFIG_VALUES} values",
        ),
        (
            "50 MB",
            BASE + "description: '" + "x" * (50 * 1024 * 1024) + "'\n",
            f"at most 1.0 MiB ({expconf.MAX_CONFIG_BYTES} bytes) is allowed",
        ),
        (
            "deep nesting",
            BASE + "data: " + "[" * 5000 + "]" * 5000 + "\n",
            f"more than {expconf.MAX_CONFIG_DEPTH} levels deep",
        ),
        (
            "a million categorical values",
            BASE
            + "hyperparameters:\n  x: {type: categorical, vals: ["
            + ",".join(["1"] * 1_000_000)
            + "]}\n",
            "at most 1.0 MiB",
        ),
        (
            "too many categorical values",
            BASE + "hyperparameters:\n  x: {type: categorical, vals: [" + ",".join(["1"] * 20_000) + "]}\n",
            f"one hyperparameter may have at most {expconf.MAX_HYPERPARAMETER_VALUES}",
        ),
    ],
)
def test_det_e_create_refuses_configs_past_the_limits(
    mallory: Cluster, web: httpx.Client, tmp_path: Path, name: str, text: str, expected: str
) -> None:
    (tmp_path / "config.yaml").write_text(text)
    result = mallory.det("experiment", "create", str(tmp_path / "config.yaml"), check=False)
    assert result.returncode == 1 and expected in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    bypassing_the_cli = web.post("/api/v1/experiments", json={"config": text, "validateOnly": True})
    assert bypassing_the_cli.status_code == 400 and expected in bypassing_the_cli.json()["message"]
    listed = mallory.det("experiment", "list")
    assert "ID" in listed.stdout
