"""The test-mode rewrite of an experiment config and the pure parts of the
local runner (`determined.cli._test_mode`)."""

from __future__ import annotations

import copy
import os
import random
import sys
from typing import Any

import pytest

from determined.cli._client import CliError
from determined.cli._test_mode import entrypoint_argv, local_environment, rewrite_for_test_mode
from determined.common.expconf import InvalidConfigError, apply_cluster_defaults, load_config
from services.searcher.sampling import sample_hparams

CONFIG: dict[str, Any] = {
    "name": "mnist",
    "entrypoint": "python3 train.py",
    "hyperparameters": {
        "global_batch_size": 64,
        "learning_rate": {"type": "log", "minval": -4, "maxval": -2, "base": 10},
        "layers": {"type": "int", "minval": 1, "maxval": 4},
        "dropout": {"type": "double", "minval": 0.2, "maxval": 0.5},
        "optimizer": {"type": "categorical", "vals": ["adam", "sgd"]},
        "fixed": {"type": "const", "val": {"a": 1}},
        "block": {"width": 8, "act": {"type": "categorical", "vals": ["relu", "gelu"]}},
    },
    "searcher": {
        "name": "random",
        "metric": "validation_loss",
        "smaller_is_better": False,
        "max_trials": 16,
        "max_length": {"epochs": 10},
    },
    "max_restarts": 5,
    "resources": {"slots_per_trial": 1},
}


def test_the_searcher_runs_one_trial_for_one_batch_keeping_the_metric() -> None:
    rewritten = rewrite_for_test_mode(CONFIG)

    assert rewritten["searcher"] == {
        "name": "single",
        "metric": "validation_loss",
        "smaller_is_better": False,
        "max_length": {"batches": 1},
    }
    assert rewritten["max_restarts"] == 0
    assert rewritten["name"] == "mnist (test mode)"
    assert rewritten["resources"] == {"slots_per_trial": 1}  # the rest is as written
    assert rewritten["entrypoint"] == "python3 train.py"
    assert rewritten["environment"] == {"environment_variables": ["DET_TEST_MODE=1"]}


def test_the_test_mode_variable_joins_every_slot_types_variables() -> None:
    per_slot_type = {**CONFIG, "environment": {"environment_variables": {"cpu": ["A=1"], "cuda": []}}}
    listed = {**CONFIG, "environment": {"image": "x", "environment_variables": ["A=1"]}}

    assert rewrite_for_test_mode(per_slot_type)["environment"] == {
        "environment_variables": {"cpu": ["A=1", "DET_TEST_MODE=1"], "cuda": ["DET_TEST_MODE=1"]}
    }
    assert rewrite_for_test_mode(listed)["environment"] == {
        "image": "x",
        "environment_variables": ["A=1", "DET_TEST_MODE=1"],
    }


def test_every_hyperparameter_becomes_one_deterministic_constant() -> None:
    hparams = rewrite_for_test_mode(CONFIG)["hyperparameters"]

    assert hparams == {
        "global_batch_size": {"type": "const", "val": 64},
        "learning_rate": {"type": "const", "val": pytest.approx(1e-3)},
        "layers": {"type": "const", "val": 2},
        "dropout": {"type": "const", "val": pytest.approx(0.35)},
        "optimizer": {"type": "const", "val": "adam"},
        "fixed": {"type": "const", "val": {"a": 1}},
        "block": {
            "type": "object",
            "vals": {"width": {"type": "const", "val": 8}, "act": {"type": "const", "val": "relu"}},
        },
    }
    assert rewrite_for_test_mode(CONFIG) == rewrite_for_test_mode(CONFIG)


def test_the_searcher_samples_exactly_the_chosen_values() -> None:
    stored = load_config(rewrite_for_test_mode(CONFIG)).hyperparameters

    sampled = sample_hparams(stored, random.Random(7))

    assert sampled["layers"] == 2 and sampled["optimizer"] == "adam"
    assert sampled["block"] == {"width": 8, "act": "relu"}
    assert sampled["fixed"] == {"a": 1}
    assert sampled["global_batch_size"] == 64


def test_no_checkpoint_is_kept_with_the_cluster_default_storage() -> None:
    rewritten = rewrite_for_test_mode(CONFIG)

    assert rewritten["checkpoint_storage"] == {
        "type": "shared_fs", "save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0,
    }  # fmt: skip
    defaulted = apply_cluster_defaults(
        load_config(rewritten), checkpoint_host_path="/data/checkpoints", experiment_seed=1, name="x"
    )
    assert defaulted.checkpoint_storage is not None
    assert defaulted.checkpoint_storage.host_path == "/data/checkpoints"
    assert defaulted.name == "mnist (test mode)"


def test_a_configured_storage_is_kept_with_no_checkpoint_kept() -> None:
    config = dict(CONFIG, checkpoint_storage={"type": "s3", "bucket": "models", "save_trial_best": 3})

    storage = rewrite_for_test_mode(config)["checkpoint_storage"]

    assert storage == {
        "type": "s3", "bucket": "models", "save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0,
    }  # fmt: skip


def test_asha_and_grid_configs_become_valid_single_searches() -> None:
    asha = dict(
        CONFIG,
        searcher={"name": "adaptive_asha", "metric": "loss", "max_trials": 8,
                  "time_metric": "batches", "max_time": 1000, "max_concurrent_trials": 2},
    )  # fmt: skip
    grid = dict(CONFIG, searcher={"name": "grid", "metric": "acc", "smaller_is_better": False},
                hyperparameters={"layers": {"type": "int", "minval": 1, "maxval": 9, "count": 3}})  # fmt: skip

    assert rewrite_for_test_mode(asha)["searcher"] == {
        "name": "single", "metric": "loss", "smaller_is_better": True, "max_length": {"batches": 1},
    }  # fmt: skip
    assert rewrite_for_test_mode(grid)["hyperparameters"] == {"layers": {"type": "const", "val": 5}}


def test_a_warm_start_source_is_kept() -> None:
    config = dict(CONFIG, searcher={"name": "single", "metric": "loss", "source_trial_id": 12})

    assert rewrite_for_test_mode(config)["searcher"]["source_trial_id"] == 12


def test_an_unnamed_experiment_and_no_hyperparameters() -> None:
    config = {"entrypoint": ["python3", "train.py"], "searcher": {"name": "single", "metric": "loss"}}

    rewritten = rewrite_for_test_mode(config)

    assert rewritten["name"] == "test mode"
    assert rewritten["hyperparameters"] == {}
    load_config(rewritten)


def test_the_input_is_not_changed() -> None:
    before = copy.deepcopy(CONFIG)

    rewrite_for_test_mode(CONFIG)

    assert before == CONFIG


def test_an_invalid_config_is_refused_with_every_problem() -> None:
    config = dict(CONFIG, searcher={"name": "random"}, max_restarts=-1)

    with pytest.raises(InvalidConfigError) as refused:
        rewrite_for_test_mode(config)

    assert any("metric" in error for error in refused.value.errors)
    assert any("max_restarts" in error for error in refused.value.errors)


def test_entrypoints_run_as_the_agent_runs_them() -> None:
    assert entrypoint_argv("python3 train.py --x 1", startup_hook=False) == [
        "sh",
        "-c",
        "python3 train.py --x 1",
    ]
    assert entrypoint_argv(["python3", "train.py"], startup_hook=False) == ["python3", "train.py"]
    hooked = entrypoint_argv(["python3", "train.py"], startup_hook=True)
    assert hooked[:2] == ["bash", "-c"] and "source ./startup-hook.sh" in hooked[2]
    assert hooked[-2:] == ["python3", "train.py"]
    with pytest.raises(CliError):
        entrypoint_argv(None, startup_hook=False)


def test_the_local_environment_has_no_trial_variables() -> None:
    config = load_config(
        {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"},
         "environment": {"environment_variables": {"cpu": ["MODE=cpu"], "cuda": ["MODE=cuda"]}}}
    )  # fmt: skip
    inherited = {"PATH": "/usr/bin", "HOME": "/home/u", "DET_MASTER": "m:8080", "DET_ALLOCATION_ID": "a.1",
                 "DET_SESSION_TOKEN": "secret", "DET_HPARAMS": "{}"}  # fmt: skip

    env = local_environment(inherited, config)

    assert not {"DET_MASTER", "DET_ALLOCATION_ID", "DET_SESSION_TOKEN", "DET_HPARAMS"} & set(env)
    assert env["PATH"].split(os.pathsep) == [os.path.dirname(sys.executable), "/usr/bin"]
    assert env["HOME"] == "/home/u" and env["MODE"] == "cpu" and env["PYTHONUNBUFFERED"] == "1"
