"""Reading a configuration from YAML text or a mapping, and the defaults
the cluster fills in at creation time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from determined.common.expconf._errors import InvalidConfigError, messages_from
from determined.common.expconf._experiment import ExperimentConfig
from determined.common.expconf._limits import check_config_value
from determined.common.expconf._storage import CheckpointStorage
from determined.common.expconf._yaml import parse_yaml


def load_config(
    source: str | bytes | Mapping[str, Any], *, new_experiment: bool = True, unmanaged: bool = False
) -> ExperimentConfig:
    """Validate a configuration given as YAML/JSON text or an already-parsed mapping.

    ``new_experiment`` (the default) also applies the creation-time rules: an
    entrypoint is required (unless `unmanaged`: a detached run's script, core_v2, runs
    outside the cluster) and the removed searchers are refused. Raises
    InvalidConfigError listing every problem, or naming the limit (`_limits.py`) the
    config goes past: checked before the config is expanded or validated. A stored config
    (``new_experiment=False``, a mapping) was checked when it was created: the defaults it
    has gained since must not push it past a limit."""
    if isinstance(source, str | bytes):
        data = parse_yaml(source)
    else:
        if new_experiment:
            check_config_value(source)
        data = source
    if data is None:
        raise InvalidConfigError(["the experiment configuration is empty"])
    if not isinstance(data, Mapping):
        kind = type(data).__name__
        raise InvalidConfigError([f"the experiment configuration must be a mapping of fields, not a {kind}"])
    try:
        return ExperimentConfig.model_validate(
            dict(data), context={"new_experiment": new_experiment, "unmanaged": unmanaged}
        )
    except ValidationError as exc:
        raise InvalidConfigError(list(dict.fromkeys(messages_from(exc, ExperimentConfig)))) from None


def apply_cluster_defaults(
    config: ExperimentConfig,
    *,
    checkpoint_host_path: str,
    experiment_seed: int,
    name: str,
    checkpoint_storage: CheckpointStorage | None = None,
) -> ExperimentConfig:
    """Fill what the cluster decides: storage, seed and name. Pure: the caller hands
    in the seed and the petname so that replaying gives the same config.

    `checkpoint_storage` is the cluster's default storage (`det deploy local cluster-up
    --checkpoint-storage`; None: shared_fs). A `shared_fs` storage without a host_path
    gets `checkpoint_host_path`."""
    storage = cluster_storage(
        config.checkpoint_storage, checkpoint_storage or CheckpointStorage(type="shared_fs")
    )
    if storage.type == "shared_fs" and storage.host_path is None:
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


def cluster_storage(own: CheckpointStorage | None, default: CheckpointStorage) -> CheckpointStorage:
    """An experiment's storage given the cluster's default, as Determined merges them: none
    of its own takes the default; one of the same type fills the fields it leaves out from
    the default (an endpoint, keys, the GC policy; what its type requires, such as the
    bucket, it has already); one of another type stands alone. One with no type (only a GC
    policy) is the default with that policy."""
    if own is None:
        return default
    if own.type is not None and own.type != default.type:
        return own
    return default.model_copy(update={field: getattr(own, field) for field in own.model_fields_set})
