"""Reading a configuration from YAML text or a mapping, and the defaults
the cluster fills in at creation time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from determined.common.expconf._errors import InvalidConfigError, messages_from
from determined.common.expconf._experiment import ExperimentConfig
from determined.common.expconf._storage import CheckpointStorage
from determined.common.expconf._yaml import parse_yaml


def load_config(source: str | bytes | Mapping[str, Any], *, new_experiment: bool = True) -> ExperimentConfig:
    """Validate a configuration given as YAML/JSON text or an already-parsed mapping.

    ``new_experiment`` (the default) also applies the creation-time rules: an
    entrypoint is required and the removed searchers are refused. Raises
    InvalidConfigError listing every problem."""
    data = parse_yaml(source) if isinstance(source, str | bytes) else source
    if data is None:
        raise InvalidConfigError(["the experiment configuration is empty"])
    if not isinstance(data, Mapping):
        kind = type(data).__name__
        raise InvalidConfigError([f"the experiment configuration must be a mapping of fields, not a {kind}"])
    try:
        return ExperimentConfig.model_validate(dict(data), context={"new_experiment": new_experiment})
    except ValidationError as exc:
        raise InvalidConfigError(list(dict.fromkeys(messages_from(exc, ExperimentConfig)))) from None


def apply_cluster_defaults(
    config: ExperimentConfig, *, checkpoint_host_path: str, experiment_seed: int, name: str
) -> ExperimentConfig:
    """Fill what the cluster decides: storage, seed and name. Pure: the caller hands
    in the seed and the petname so that replaying gives the same config."""
    storage = config.checkpoint_storage
    if storage is None:
        storage = CheckpointStorage(type="shared_fs", host_path=checkpoint_host_path)
    elif storage.type == "shared_fs" and storage.host_path is None:
        storage = storage.model_copy(update={"host_path": checkpoint_host_path})
    reproducibility = config.reproducibility
    if reproducibility.experiment_seed is None:
        reproducibility = reproducibility.model_copy(update={"experiment_seed": experiment_seed})
    return config.model_copy(
        update={
            "checkpoint_storage": storage,
            "reproducibility": reproducibility,
            "name": config.name if config.name is not None else name,
        }
    )
