"""The experiment configuration: one typed model, validated in one pass.

Public API::

    load_config(text_or_mapping, *, new_experiment=True) -> ExperimentConfig
    parse_yaml(text) -> Any                        (YAML as configs are read, within the limits)
    apply_cluster_defaults(config, *, checkpoint_host_path, experiment_seed, name,
                           checkpoint_storage=None) -> ExperimentConfig
    apply_overrides(mapping, ["searcher.max_trials=4", ...]) -> dict
    ExperimentConfig.to_json_dict() -> dict       (the stored, fully defaulted form)
    ExperimentConfig.warnings() -> list[str]      (deprecations; the config is valid)
    load_task_config(text_or_mapping, task_type) -> TaskConfig   (notebooks, TensorBoards,
                                                   commands, shells: _task.py)

Limits (size, depth, values with aliases expanded, hyperparameter values, grid points):
``determined.common.expconf._limits``, checked by ``parse_yaml`` and ``load_config``.

Errors::

    InvalidConfigError(Exception)   .errors: list[str], one "<path>: <rule>" per problem
"""

from determined.common.expconf._errors import InvalidConfigError
from determined.common.expconf._experiment import ExperimentConfig
from determined.common.expconf._hyperparameters import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    Hyperparameter,
    HyperparameterGroup,
    IntHyperparameter,
    LogHyperparameter,
)
from determined.common.expconf._lengths import Length
from determined.common.expconf._limits import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_VALUES,
    MAX_GRID_POINTS,
    MAX_HYPERPARAMETER_VALUES,
)
from determined.common.expconf._load import apply_cluster_defaults, load_config
from determined.common.expconf._overrides import apply_overrides, merged_config
from determined.common.expconf._resources import BindMount, Environment, Resources
from determined.common.expconf._searcher import SearcherConfig
from determined.common.expconf._storage import CheckpointStorage
from determined.common.expconf._task import TaskConfig, duration_seconds, load_task_config
from determined.common.expconf._yaml import parse_yaml

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "MAX_GRID_POINTS",
    "MAX_HYPERPARAMETER_VALUES",
    "BindMount",
    "CategoricalHyperparameter",
    "CheckpointStorage",
    "ConstHyperparameter",
    "DoubleHyperparameter",
    "Environment",
    "ExperimentConfig",
    "Hyperparameter",
    "HyperparameterGroup",
    "IntHyperparameter",
    "InvalidConfigError",
    "Length",
    "LogHyperparameter",
    "Resources",
    "SearcherConfig",
    "TaskConfig",
    "apply_cluster_defaults",
    "apply_overrides",
    "duration_seconds",
    "load_config",
    "load_task_config",
    "merged_config",
    "parse_yaml",
]
