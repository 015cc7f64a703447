"""Checkpoint garbage collection, deletion and downloads end to end (issue 10), through the
real CLI, the checkpoint service and a local cluster:

- a random search with the default policy (save_trial_best 1, save_trial_latest 1) ends
  holding exactly each trial's best-validated and latest checkpoint, in the storage and in
  `det experiment list-checkpoints`; `set gc-policy` previews without `--yes`, then keeps
  only the experiment's best (1/0/0) and finally empties the storage (0/0/0);
- the same on S3: a cluster started with `cluster-up --checkpoint-storage FILE` pointing at
  a moto S3 server, whose experiments store there without a section of their own (and
  elsewhere with one); then `det experiment delete` removes the experiment;
- `det checkpoint download` directly from the storage and streamed through the gateway
  (resuming a partial file), `det checkpoint delete`, `core_context.checkpoint.delete`, and
  a checkpoint registered as a model version that no deletion touches.

The trials are Core API scripts that checkpoint a few KiB at a time, so the file runs in
about two minutes on 2 CPU cores.
"""

import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.e2e_cluster import Cluster, det, started_cluster, wait_for
from support.s3_server import S3Server

pytestmark = pytest.mark.e2e

TERMINAL = ("COMPLETED", "ERROR", "CANCELED")
STEPS = range(1, 7)
UNVALIDATED_STEP = 3

# Checkpoints at steps 1..6 and validates each but step 3 (whose checkpoint then has no
# metric). The loss is |step - best| + step / 100 + x: its minimum is near the trial's
# `best` step, the latest checkpoint (step 6) is often not the best, and `x` (a double
# below 0.001) keeps two trials' losses apart without changing the order within a trial.
GC_TRAIN_PY = textwrap.dedent(
    f"""
    import determined as det

    info = det.get_cluster_info()
    best, x = info.trial.hparams["best"], info.trial.hparams["x"]
    with det.core.init() as core_context:
        for step in range({STEPS.start}, {STEPS.stop}):
            with core_context.checkpoint.store_path({{"steps_completed": step}}) as (path, storage_id):
                (path / "weights.bin").write_bytes(bytes([step]) * 4096)
                (path / "optimizer").mkdir()
                (path / "optimizer" / "state.txt").write_text(f"step {{step}}")
            print("checkpoint", step, storage_id, flush=True)
            if step != {UNVALIDATED_STEP}:
                loss = abs(step - best) + step / 100 + x
                core_context.train.report_validation_metrics(steps_completed=step, metrics={{"loss": loss}})
    """
)

# One trial: a scratch checkpoint the trial deletes itself, then three checkpoints with
# losses 0.5, 0.2, 0.4 (the best is step 2, the latest step 3).
SINGLE_TRAIN_PY = textwrap.dedent(
    """
    import os
    import determined as det

    with det.core.init() as core_context:
        with core_context.checkpoint.store_path({"steps_completed": 0}) as (path, scratch):
            (path / "scratch.txt").write_text("gone soon")
        print("scratch", scratch, flush=True)
        core_context.checkpoint.delete(scratch)
        for step, loss in ((1, 0.5), (2, 0.2), (3, 0.4)):
            with core_context.checkpoint.store_path({"steps_completed": step, "note": "hi"}) as (path, storage_id):
                (path / "weights.bin").write_bytes(os.urandom(300_000))
                (path / "sub").mkdir()
                (path / "sub" / "notes.txt").write_text(f"step {step}")
            print("checkpoint", step, storage_id, flush=True)
            core_context.train.report_validation_metrics(steps_completed=step, metrics={"loss": loss})
    """
)

CHECKPOINT_LINE = re.compile(r"checkpoint (\d+) ([0-9a-f-]{36})")


def loss(step: int, hparams: dict[str, Any]) -> float:
    return abs(step - int(hparams["best"])) + step / 100 + float(hparams["x"])


def search_config(trials: int, storage: dict[str, Any] | None) -> str:
    document: dict[str, Any] = {
        "name": "gc",
        "entrypoint": "python3 train.py",
        "hyperparameters": {
            "best": {"type": "int", "minval": 1, "maxval": 6},
            "x": {"type": "double", "minval": 0.0, "maxval": 0.001},
        },
        "searcher": {"name": "random", "metric": "loss", "max_trials": trials, "max_concurrent_trials": 2},
        "max_restarts": 0,
    }
    if storage is not None:
        document["checkpoint_storage"] = storage
    return json.dumps(document)


def single_config(storage: dict[str, Any] | None) -> str:
    document: dict[str, Any] = {
        "name": "checkpoints",
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss"},
        "max_restarts": 0,
    }
    if storage is not None:
        document["checkpoint_storage"] = storage
    return json.dumps(document)


def run_to_completion(cluster: Cluster, context: Path, script: str, config: str) -> int:
    (context / "train.py").write_text(script)
    experiment_id = cluster.create(context, config)
    wait_for(lambda: cluster.experiment_state(experiment_id) in TERMINAL, f"experiment {experiment_id}", 180)
    trials = cluster.trials(experiment_id)
    logs = "\n".join(cluster.logs(t["id"])[-3000:] for t in trials if t["state"] != "COMPLETED")
    assert cluster.experiment_state(experiment_id) == "COMPLETED", logs
    assert trials and {t["state"] for t in trials} == {"COMPLETED"}, (trials, logs)
    return experiment_id


def reported(cluster: Cluster, trial_id: int) -> dict[int, str]:
    """step -> uuid of each checkpoint the trial stored, as its script printed them."""
    return {int(step): uuid for step, uuid in CHECKPOINT_LINE.findall(cluster.logs(trial_id))}


def listed(cluster: Cluster, experiment_id: int, *flags: str) -> list[dict[str, Any]]:
    return list(cluster.json("experiment", "list-checkpoints", str(experiment_id), *flags))


def settles(read: Callable[[], set[str]], expected: set[str], what: str, deadline_s: float = 60) -> None:
    """Waits for `read()` to equal `expected` (GC runs after the event that asks for it)."""
    last: set[str] = set()

    def equal() -> bool:
        nonlocal last
        last = read()
        return last == expected

    try:
        wait_for(equal, what, deadline_s)
    except AssertionError as error:
        raise AssertionError(f"{error}: expected {sorted(expected)}, got {sorted(last)}") from None


# Trials' TensorBoard files live beside their checkpoints (tensorboard/experiment/<id>/...).
TENSORBOARD_FOLDER = "tensorboard"


def in_folder(root: Path) -> Callable[[], set[str]]:
    """The checkpoint folders under a shared_fs storage root."""
    return lambda: (
        {p.name for p in root.iterdir() if p.name != TENSORBOARD_FOLDER} if root.exists() else set()
    )


def listed_uuids(cluster: Cluster, experiment_id: int) -> Callable[[], set[str]]:
    return lambda: {c["uuid"] for c in listed(cluster, experiment_id)}


def set_gc_policy(
    cluster: Cluster,
    experiment_id: int,
    best: int,
    trial_best: int,
    latest: int,
    *flags: str,
    answer: str = "",
) -> subprocess.CompletedProcess[str]:
    args = [
        "experiment",
        "set",
        "gc-policy",
        str(experiment_id),
        "--save-experiment-best",
        str(best),
        "--save-trial-best",
        str(trial_best),
        "--save-trial-latest",
        str(latest),
        *flags,
    ]
    command = [sys.executable, "-m", "determined.cli", *args]
    return subprocess.run(
        command, check=False, input=answer, env=cluster.env, capture_output=True, text=True, timeout=60
    )


def default_policy_keeps(cluster: Cluster, experiment_id: int) -> tuple[set[str], str, set[str]]:
    """What the default policy keeps (each trial's best-validated and latest checkpoint,
    computed from the trials' hyperparameters and what their scripts printed), the
    experiment's best checkpoint, and every checkpoint stored."""
    kept: set[str] = set()
    stored: set[str] = set()
    ranked: list[tuple[float, str]] = []
    for trial in cluster.trials(experiment_id):
        uuids = reported(cluster, trial["id"])
        assert sorted(uuids) == list(STEPS), (trial, uuids)
        validated = [s for s in STEPS if s != UNVALIDATED_STEP]
        best_step = min(validated, key=lambda s: loss(s, trial["hparams"]))
        kept |= {uuids[best_step], uuids[max(STEPS)]}
        stored |= set(uuids.values())
        ranked.append((loss(best_step, trial["hparams"]), uuids[best_step]))
    return kept, min(ranked)[1], stored


def test_default_policy_then_gc_policy_changes_on_shared_fs(cluster: Cluster, tmp_path: Path) -> None:
    root = cluster.storage_folder("storage")
    context = tmp_path / "context"
    context.mkdir()
    storage = {"type": "shared_fs", "host_path": str(root)}
    experiment_id = run_to_completion(cluster, context, GC_TRAIN_PY, search_config(3, storage))
    kept, experiment_best, stored = default_policy_keeps(cluster, experiment_id)

    settles(listed_uuids(cluster, experiment_id), kept, "the default policy's GC (listing)")
    settles(in_folder(root), kept, "the default policy's GC (storage)")
    checkpoints = listed(cluster, experiment_id)
    assert {c["state"] for c in checkpoints} == {"COMPLETED"}, checkpoints
    for checkpoint in checkpoints:
        folder = root / checkpoint["uuid"]
        assert checkpoint["resources"]["weights.bin"] == 4096, checkpoint
        assert (folder / "weights.bin").stat().st_size == 4096
        assert (folder / "optimizer" / "state.txt").exists() and (folder / "metadata.json").exists()

    # The table shows every kept uuid; --best 1 is the experiment's best checkpoint.
    table = cluster.det("experiment", "list-checkpoints", str(experiment_id)).stdout
    assert all(uuid in table for uuid in kept), table
    assert [c["uuid"] for c in listed(cluster, experiment_id, "--best", "1")] == [experiment_best]
    assert experiment_best in cluster.det("experiment", "lc", str(experiment_id), "--best", "1").stdout

    # The deleted ones are still known, as DELETED.
    deleted = sorted(stored - kept)
    described = cluster.json("checkpoint", "describe", deleted[0])
    assert described["state"] == "DELETED", described

    # Without --yes: a preview naming what would go, and a question; "n" keeps everything.
    preview = set_gc_policy(cluster, experiment_id, 0, 0, 0, answer="n\n")
    assert all(uuid in preview.stdout for uuid in kept), preview.stdout + preview.stderr
    assert f"deletes these {len(kept)} checkpoints" in preview.stdout and "freeing" in preview.stdout
    time.sleep(2)
    assert listed_uuids(cluster, experiment_id)() == kept and in_folder(root)() == kept

    changed = set_gc_policy(cluster, experiment_id, 1, 0, 0, "--yes")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    settles(listed_uuids(cluster, experiment_id), {experiment_best}, "GC with policy 1/0/0 (listing)")
    settles(in_folder(root), {experiment_best}, "GC with policy 1/0/0 (storage)")

    emptied = set_gc_policy(cluster, experiment_id, 0, 0, 0, "--yes")
    assert emptied.returncode == 0, emptied.stdout + emptied.stderr
    settles(listed_uuids(cluster, experiment_id), set(), "GC with policy 0/0/0 (listing)")
    settles(in_folder(root), set(), "GC with policy 0/0/0 (storage)")
    every = cluster.json("trial", "list-checkpoints", str(cluster.trials(experiment_id)[0]["id"]))
    assert every == [], every


@pytest.fixture
def s3_storage(s3_server: S3Server) -> dict[str, Any]:
    """The storage section of a fresh bucket on the test session's S3 server."""
    return s3_server.storage(prefix="checkpoints")


def in_bucket(s3_server: S3Server, storage: dict[str, Any]) -> Callable[[], set[str]]:
    """The checkpoint uuids that have objects under the storage's prefix."""
    prefix = storage["prefix"] + "/"
    return lambda: (
        {key[len(prefix) :].split("/", 1)[0] for key in s3_server.keys(storage["bucket"], prefix)}
        - {TENSORBOARD_FOLDER}
    )


@pytest.fixture
def s3_cluster(s3_storage: dict[str, Any], tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of its own whose default checkpoint storage is the S3 bucket."""
    storage_file = tmp_path / "storage.yaml"
    storage_file.write_text(yaml.safe_dump(s3_storage))
    with started_cluster("det-e2e-s3", ["--checkpoint-storage", str(storage_file)]) as running:
        yield running


@pytest.mark.slow
def test_the_same_on_s3_from_the_clusters_default_storage(
    s3_cluster: Cluster, s3_server: S3Server, s3_storage: dict[str, Any], tmp_path: Path
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    experiment_id = run_to_completion(s3_cluster, context, GC_TRAIN_PY, search_config(2, None))
    config = s3_cluster.det("experiment", "config", str(experiment_id)).stdout
    assert s3_storage["bucket"] in config, config
    kept, _, stored = default_policy_keeps(s3_cluster, experiment_id)
    assert kept < stored

    settles(listed_uuids(s3_cluster, experiment_id), kept, "the default policy's GC on S3 (listing)")
    settles(in_bucket(s3_server, s3_storage), kept, "the default policy's GC on S3 (bucket)")

    # Downloads from the bucket: directly (auto: the client reaches the server) and
    # through the gateway.
    some = min(kept)
    for mode in ("auto", "master"):
        s3_cluster.det("checkpoint", "download", some, "-o", str(tmp_path / mode), "--mode", mode)
        assert (tmp_path / mode / "weights.bin").stat().st_size == 4096, mode
        assert (tmp_path / mode / "optimizer" / "state.txt").exists(), mode

    emptied = set_gc_policy(s3_cluster, experiment_id, 0, 0, 0, "--yes")
    assert emptied.returncode == 0, emptied.stdout + emptied.stderr
    settles(listed_uuids(s3_cluster, experiment_id), set(), "GC with policy 0/0/0 on S3 (listing)")
    settles(in_bucket(s3_server, s3_storage), set(), "GC with policy 0/0/0 on S3 (bucket)")

    s3_cluster.det("experiment", "delete", str(experiment_id), "--yes")
    wait_for(
        lambda: experiment_id not in {e["id"] for e in s3_cluster.json("experiment", "list")},
        "the deleted experiment to leave the list",
    )

    # An experiment's own storage section overrides the cluster's default.
    root = s3_cluster.storage_folder("own-storage")
    own = run_to_completion(
        s3_cluster, context, SINGLE_TRAIN_PY, single_config({"type": "shared_fs", "host_path": str(root)})
    )
    steps = reported(s3_cluster, s3_cluster.trials(own)[0]["id"])
    settles(in_folder(root), {steps[2], steps[3]}, "the default policy's GC on shared_fs")
    assert in_bucket(s3_server, s3_storage)() == set()


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_download_delete_and_model_versions(cluster: Cluster, tmp_path: Path) -> None:
    root = cluster.storage_folder("storage")
    context = tmp_path / "context"
    context.mkdir()
    storage = {"type": "shared_fs", "host_path": str(root)}
    experiment_id = run_to_completion(cluster, context, SINGLE_TRAIN_PY, single_config(storage))
    [trial] = cluster.trials(experiment_id)
    logs = cluster.logs(trial["id"])
    [scratch] = re.findall(r"scratch ([0-9a-f-]{36})", logs)
    steps = reported(cluster, trial["id"])
    best, latest = steps[2], steps[3]

    # The trial's own delete and the default policy leave the best and the latest.
    settles(listed_uuids(cluster, experiment_id), {best, latest}, "GC of the single trial (listing)")
    settles(in_folder(root), {best, latest}, "GC of the single trial (storage)")
    trial_listing = cluster.json("trial", "list-checkpoints", str(trial["id"]))
    assert {c["uuid"] for c in trial_listing} == {best, latest}, trial_listing
    gone = cluster.json("checkpoint", "describe", scratch)
    assert gone["state"] == "DELETED", gone

    # Downloads, directly from the storage and through the gateway, give the stored files.
    stored = tree(root / latest)
    assert {"weights.bin", "sub/notes.txt", "metadata.json"} <= set(stored), sorted(stored)
    for mode in ("direct", "master", "auto"):
        target = tmp_path / f"download-{mode}"
        result = cluster.det("checkpoint", "download", latest, "-o", str(target), "--mode", mode)
        assert tree(target) == stored, (mode, result.stdout)
    # A download through the gateway resumes a file cut short.
    resumed = tmp_path / "download-resumed"
    resumed.mkdir()
    (resumed / "weights.bin").write_bytes(stored["weights.bin"][:100_000])
    cluster.det("checkpoint", "download", latest, "-o", str(resumed), "--mode", "master")
    assert tree(resumed) == stored

    described = cluster.json("checkpoint", "describe", latest)
    assert described["steps_completed"] == 3 and described["state"] == "COMPLETED", described
    assert described["metadata"]["note"] == "hi", described

    # A model version is never deleted: not by the user, not by GC, not with its experiment.
    cluster.det("model", "create", f"gc-model-{experiment_id}")
    cluster.det("model", "register-version", f"gc-model-{experiment_id}", latest)
    model = cluster.json("model", "describe", f"gc-model-{experiment_id}")
    assert [v["checkpoint"]["uuid"] for v in model["versions"]] == [latest], model
    assert f"gc-model-{experiment_id}" in {m["name"] for m in cluster.json("model", "list")}

    refused = cluster.det("checkpoint", "delete", latest, "--yes", check=False)
    assert refused.returncode == 1 and latest in refused.stderr, refused.stderr
    unknown = cluster.det(
        "checkpoint", "delete", "00000000-0000-4000-8000-000000000000", "--yes", check=False
    )
    assert unknown.returncode == 1 and "00000000-0000-4000-8000-000000000000" in unknown.stderr, (
        unknown.stderr
    )
    kept_experiment = cluster.det("experiment", "delete", str(experiment_id), "--yes", check=False)
    assert kept_experiment.returncode == 1 and latest in kept_experiment.stderr, kept_experiment.stderr

    cluster.det("checkpoint", "delete", best, "--yes")
    settles(listed_uuids(cluster, experiment_id), {latest}, "det checkpoint delete (listing)")
    settles(in_folder(root), {latest}, "det checkpoint delete (storage)")

    emptied = set_gc_policy(cluster, experiment_id, 0, 0, 0, "--yes")
    assert emptied.returncode == 0, emptied.stdout + emptied.stderr
    time.sleep(3)
    assert listed_uuids(cluster, experiment_id)() == {latest} and in_folder(root)() == {latest}


def test_delete_an_experiment(cluster: Cluster, tmp_path: Path) -> None:
    root = cluster.storage_folder("storage")
    context = tmp_path / "context"
    context.mkdir()
    storage = {"type": "shared_fs", "host_path": str(root)}
    experiment_id = run_to_completion(cluster, context, SINGLE_TRAIN_PY, single_config(storage))
    wait_for(lambda: len(in_folder(root)()) == 2, "the default policy's GC")

    result = cluster.det("experiment", "delete", str(experiment_id), "--yes")
    assert f"Deletion of experiment {experiment_id} is in progress" in result.stdout, result.stdout
    wait_for(
        lambda: experiment_id not in {e["id"] for e in cluster.json("experiment", "list")},
        "the deleted experiment to leave the list",
    )
    assert in_folder(root)() == set()
    described = cluster.det("experiment", "describe", str(experiment_id), check=False)
    assert described.returncode == 1, described.stdout
    assert f"experiment {experiment_id} was deleted" in described.stderr, described.stderr
    # Deleted again: nothing to do, said so.
    again = det(cluster.env, "experiment", "delete", str(experiment_id), "--yes")
    assert again.returncode == 1, again.stdout + again.stderr
