"""Valid configurations: the seed documents' configs, defaults, accessors,
cluster defaults and the stored form."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from determined.common.expconf import (
    ExperimentConfig,
    HyperparameterGroup,
    InvalidConfigError,
    Length,
    LogHyperparameter,
    apply_cluster_defaults,
    load_config,
)

SEEDS = sorted((Path(__file__).parent / "seed_configs").glob("*.yaml"))
MINIMAL = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}


@pytest.mark.parametrize("path", SEEDS, ids=[path.stem for path in SEEDS])
def test_seed_config_is_accepted_and_survives_storage(path: Path) -> None:
    config = load_config(path.read_text())

    stored = config.to_json_dict()

    assert load_config(stored) == config
    assert load_config(stored).to_json_dict() == stored


def test_there_are_seed_configs() -> None:
    assert len(SEEDS) >= 8


def _seed(name: str) -> ExperimentConfig:
    return load_config((Path(__file__).parent / "seed_configs" / f"{name}.yaml").read_text())


def test_seed_style_asha_with_only_max_length_is_accepted_with_a_warning() -> None:
    config = _seed("quickstart_adaptive")

    assert config.searcher.name == "adaptive_asha"
    assert config.searcher.max_length == Length(batches=937)
    assert config.searcher.asha_time() == ("batches", 937)
    assert any("max_length because time_metric and max_time are not set" in w for w in config.warnings())


def test_0_38_asha_uses_time_metric_and_max_time() -> None:
    config = _seed("v038_asha")

    assert config.searcher.asha_time() == ("batches", 937)
    assert config.warnings() == []
    assert config.checkpoint_storage is not None and config.checkpoint_storage.save_trial_best == 2


def test_iris_const_keeps_its_legacy_knobs_and_warns_about_them() -> None:
    config = _seed("iris_const")

    assert config.min_validation_period == Length(batches=1000)
    assert config.bind_mounts[0].read_only is True
    assert config.is_legacy_trial
    assert "min_validation_period is deprecated (only the legacy Trial APIs use it)" in config.warnings()
    assert config.launch_entrypoint() == (
        "python3 -m determined.launch.torch_distributed -- --trial model_def:IrisTrial"
    )


def test_accessors_used_by_the_services() -> None:
    config = _seed("quickstart_distributed")

    assert config.searcher.name == "single"
    assert config.searcher.metric == "validation_loss"
    assert config.searcher.smaller_is_better is True
    assert config.resources.slots_per_trial == 8
    assert config.max_restarts == 5
    assert config.entrypoint == "model_def:MNistTrial"


def test_folded_entrypoint_is_one_command_string() -> None:
    config = _seed("core_api_distributed")

    assert config.entrypoint == (
        "python3 -m determined.launch.torch_distributed python3 model_def_distributed.py"
    )
    assert not config.is_legacy_trial
    assert config.launch_entrypoint() == config.entrypoint


def test_hyperparameters_are_normalised_in_the_stored_form() -> None:
    config = load_config(
        {
            **MINIMAL,
            "hyperparameters": {
                "gbs": 64,
                "layers": [1, 2],
                "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
                "optimizer": {"name": {"type": "categorical", "vals": ["adam", "sgd"]}, "momentum": 0.9},
            },
        }
    )

    assert config.to_json_dict()["hyperparameters"] == {
        "gbs": {"type": "const", "val": 64},
        "layers": {"type": "const", "val": [1, 2]},
        "lr": {"type": "log", "minval": -4.0, "maxval": -1.0, "base": 10.0, "count": None},
        "optimizer": {
            "type": "object",
            "vals": {
                "name": {"type": "categorical", "vals": ["adam", "sgd"]},
                "momentum": {"type": "const", "val": 0.9},
            },
        },
    }
    assert isinstance(config.hyperparameters["lr"], LogHyperparameter)
    assert isinstance(config.hyperparameters["optimizer"], HyperparameterGroup)


def test_defaults_fill_the_stored_form() -> None:
    stored = load_config(MINIMAL).to_json_dict()

    assert stored["max_restarts"] == 5
    assert stored["resources"]["slots_per_trial"] == 1
    assert stored["searcher"] == {
        "name": "single",
        "metric": "loss",
        "smaller_is_better": True,
        "source_trial_id": None,
        "source_checkpoint_uuid": None,
        "max_length": None,
    }
    assert stored["min_validation_period"] == {"batches": 0}
    assert stored["scheduling_unit"] == 100
    assert stored["checkpoint_policy"] == "best"
    assert [policy["name"] for policy in stored["log_policies"]] == ["CUDA OOM", "ECC Error"]
    assert stored["checkpoint_storage"] is None
    assert stored["name"] is None


def test_random_searcher_defaults() -> None:
    searcher = load_config(
        {**MINIMAL, "searcher": {"name": "random", "metric": "m", "max_trials": 3}}
    ).searcher

    assert searcher.max_concurrent_trials == 16
    assert searcher.to_json()["max_trials"] == 3


def test_yaml_exponent_without_a_dot_is_a_number() -> None:
    config = load_config(
        "entrypoint: x\nsearcher: {name: single, metric: m}\n"
        "hyperparameters:\n  lr: {type: double, minval: 1e-5, maxval: 1e-1}\n"
    )

    assert (
        config.hyperparameters["lr"]
        == load_config(
            {**MINIMAL, "hyperparameters": {"lr": {"type": "double", "minval": 1e-5, "maxval": 0.1}}}
        ).hyperparameters["lr"]
    )


def test_yaml_dates_stay_strings_so_the_stored_form_round_trips() -> None:
    config = load_config("entrypoint: x\nsearcher: {name: single, metric: m}\ndata: {since: 2024-01-01}\n")

    assert config.data == {"since": "2024-01-01"}


def test_cluster_defaults_fill_storage_seed_and_name() -> None:
    config = load_config(MINIMAL)

    filled = apply_cluster_defaults(
        config, checkpoint_host_path="/srv/ckpt", experiment_seed=7, name="Experiment (a-b-c)"
    )

    assert filled.to_json_dict()["checkpoint_storage"]["host_path"] == "/srv/ckpt"
    assert filled.checkpoint_storage is not None and filled.checkpoint_storage.type == "shared_fs"
    assert filled.checkpoint_storage.save_trial_latest == 1
    assert filled.reproducibility.experiment_seed == 7
    assert filled.name == "Experiment (a-b-c)"
    assert config.checkpoint_storage is None  # the input is untouched
    assert load_config(filled.to_json_dict()) == filled


def test_cluster_defaults_keep_what_the_user_chose() -> None:
    config = load_config(
        {
            **MINIMAL,
            "name": "mine",
            "reproducibility": {"experiment_seed": 3},
            "checkpoint_storage": {"type": "s3", "bucket": "b"},
        }
    )

    filled = apply_cluster_defaults(config, checkpoint_host_path="/srv", experiment_seed=9, name="petname")

    assert filled == config


def test_cluster_defaults_fill_a_missing_shared_fs_host_path() -> None:
    config = load_config({**MINIMAL, "checkpoint_storage": {"type": "shared_fs", "storage_path": "ck"}})

    filled = apply_cluster_defaults(config, checkpoint_host_path="/srv", experiment_seed=9, name="n")

    assert filled.checkpoint_storage is not None
    assert (filled.checkpoint_storage.host_path, filled.checkpoint_storage.storage_path) == ("/srv", "ck")


def test_removed_searchers_parse_when_not_creating() -> None:
    config = load_config(
        {**MINIMAL, "searcher": {"name": "adaptive", "metric": "m", "budget": 10}}, new_experiment=False
    )

    assert config.searcher.name == "adaptive"
    with pytest.raises(InvalidConfigError, match="has been removed and is not valid for new experiments"):
        load_config(config.to_json_dict())


def test_entrypoint_is_optional_when_not_creating() -> None:
    assert load_config({"searcher": MINIMAL["searcher"]}, new_experiment=False).entrypoint is None


def test_config_is_immutable() -> None:
    config = load_config(MINIMAL)

    with pytest.raises(ValueError):
        config.max_restarts = 1


def test_importing_expconf_is_light() -> None:
    code = "import sys, determined.common.expconf; print(any(m in sys.modules for m in ('torch', 'sqlalchemy', 'grpc')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert result.stdout.strip() == "False"
