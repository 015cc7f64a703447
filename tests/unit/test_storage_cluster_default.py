"""The cluster-wide default checkpoint storage: `det deploy local cluster-up
--checkpoint-storage FILE.yaml` -> the gateway's DET_CHECKPOINT_STORAGE -> every new
experiment's storage, unless the experiment's own section says otherwise."""

import argparse
import json
import pathlib
from typing import Any

import pytest
from pydantic import ValidationError

from determined.cli._client import CliError
from determined.cli.deploy import add_parser, checkpoint_storage_setting, scheduler_settings
from determined.common import expconf
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.experiments import commands as experiment_commands
from services.gateway.settings import GatewaySettings

S3_DEFAULT = {"type": "s3", "bucket": "team", "endpoint_url": "http://minio:9000", "save_trial_best": 2}
BASE = "entrypoint: python3 train.py\nsearcher: {name: single, metric: loss, max_length: 1}\n"


def stored_storage(config_yaml: str, default: dict[str, Any] | None) -> dict[str, Any]:
    validated = experiment_commands.validate_config(
        config_yaml,
        checkpoint_host_path="/data/checkpoints",
        experiment_seed=1,
        name="n",
        checkpoint_storage=expconf.CheckpointStorage.model_validate(default) if default else None,
    )
    storage: dict[str, Any] = json.loads(validated.config_json)["checkpoint_storage"]
    return {field: value for field, value in storage.items() if value is not None}


def test_an_experiment_without_storage_takes_the_clusters() -> None:
    assert stored_storage(BASE, S3_DEFAULT) == dict(S3_DEFAULT, save_experiment_best=0, save_trial_latest=1)


def test_an_experiment_of_the_same_type_fills_in_from_the_clusters() -> None:
    """What the experiment leaves out (the endpoint, keys, the GC policy) comes from the
    cluster's; what a section of its type requires (the bucket) it must give itself."""
    own = BASE + "checkpoint_storage: {type: s3, bucket: mine, prefix: p, save_trial_best: 5}\n"
    assert stored_storage(own, S3_DEFAULT) == dict(
        S3_DEFAULT, bucket="mine", prefix="p", save_trial_best=5, save_experiment_best=0, save_trial_latest=1
    )
    with pytest.raises(InvalidArgumentError, match="checkpoint_storage.bucket: is required"):
        stored_storage(BASE + "checkpoint_storage: {type: s3, prefix: p}\n", S3_DEFAULT)


def test_an_experiment_of_another_type_stands_alone() -> None:
    own = BASE + "checkpoint_storage: {type: shared_fs, storage_path: mine}\n"
    assert stored_storage(own, S3_DEFAULT) == {
        "type": "shared_fs",
        "host_path": "/data/checkpoints",
        "storage_path": "mine",
        "propagation": "rprivate",
        "save_experiment_best": 0,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }


def test_a_section_with_only_a_gc_policy_completes_the_clusters() -> None:
    policy = BASE + "checkpoint_storage: {save_trial_latest: 3, save_trial_best: 0}\n"
    assert stored_storage(policy, S3_DEFAULT) == dict(
        S3_DEFAULT, save_experiment_best=0, save_trial_best=0, save_trial_latest=3
    )
    assert stored_storage(policy, None)["type"] == "shared_fs"
    assert stored_storage(policy, None)["save_trial_latest"] == 3
    with pytest.raises(InvalidArgumentError, match="checkpoint_storage.bucket: needs the storage's type"):
        stored_storage(BASE + "checkpoint_storage: {bucket: b}\n", S3_DEFAULT)


def test_without_a_cluster_default_storage_is_shared_fs_under_the_checkpoint_path() -> None:
    assert stored_storage(BASE, None)["host_path"] == "/data/checkpoints"
    assert (
        stored_storage(BASE, {"type": "shared_fs", "storage_path": "s"})["host_path"] == "/data/checkpoints"
    )


def test_the_gateway_reads_and_checks_its_default_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DET_DATABASE_URL", "postgresql://u@h/db")
    assert GatewaySettings().checkpoint_storage is None
    monkeypatch.setenv("DET_CHECKPOINT_STORAGE", json.dumps(S3_DEFAULT))
    storage = GatewaySettings().checkpoint_storage
    assert storage is not None and storage.bucket == "team" and storage.save_trial_best == 2
    monkeypatch.setenv("DET_CHECKPOINT_STORAGE", json.dumps({"type": "s3"}))
    with pytest.raises(ValidationError, match="bucket"):
        GatewaySettings()
    monkeypatch.setenv("DET_CHECKPOINT_STORAGE", json.dumps({"save_trial_best": 2}))
    with pytest.raises(ValidationError, match="needs a type"):
        GatewaySettings()


def up_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["deploy", "local", "cluster-up", *argv])


@pytest.mark.parametrize(
    "text", ["type: s3\nbucket: team\n", "checkpoint_storage:\n  type: s3\n  bucket: team\n"]
)
def test_cluster_up_hands_the_file_to_the_services(tmp_path: pathlib.Path, text: str) -> None:
    (tmp_path / "storage.yaml").write_text(text)
    settings = scheduler_settings(up_args("--checkpoint-storage", str(tmp_path / "storage.yaml")))
    assert json.loads(settings["DET_CHECKPOINT_STORAGE"]) == {"type": "s3", "bucket": "team"}
    assert "DET_CHECKPOINT_STORAGE" not in scheduler_settings(up_args())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("type: s3\nbukket: team\n", 'unknown field "bukket" at top level \\(did you mean "bucket"\\?\\)'),
        ("type: s3\n", "bucket: is required"),
        ("save_trial_best: 2\n", "type is required"),
        ("- a\n- b\n", "must hold a checkpoint_storage section"),
        ("type: [s3\n", "invalid YAML at line 2"),
    ],
)
def test_cluster_up_refuses_a_bad_file(tmp_path: pathlib.Path, text: str, problem: str) -> None:
    (tmp_path / "storage.yaml").write_text(text)
    with pytest.raises(CliError, match=problem):
        checkpoint_storage_setting(tmp_path / "storage.yaml")
    with pytest.raises(CliError, match="cannot read --checkpoint-storage"):
        checkpoint_storage_setting(tmp_path / "missing.yaml")
