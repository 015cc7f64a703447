"""The whole experiment configuration (``schemas/expconf/v0/experiment.json``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, ValidationInfo, model_validator

from determined.common.entrypoint import is_legacy_trial, launch_entrypoint
from determined.common.expconf._base import ConfigModel, raise_problems
from determined.common.expconf._errors import ConfigRuleError
from determined.common.expconf._hyperparameters import (
    Hyperparameters,
    grid_point_count,
    hyperparameters_to_json,
    walk_ranges,
)
from determined.common.expconf._lengths import Length, batches
from determined.common.expconf._limits import grid_points_rule
from determined.common.expconf._resources import BindMount, Environment, Resources
from determined.common.expconf._searcher import SearcherConfig
from determined.common.expconf._sections import (
    LogPolicy,
    Optimizations,
    Profiling,
    Reproducibility,
    RetentionPolicy,
    default_log_policies,
)
from determined.common.expconf._storage import CheckpointStorage

_DEPRECATED_DEFAULTS: dict[str, Any] = {
    "min_validation_period": batches(0),
    "min_checkpoint_period": batches(0),
    "scheduling_unit": 100,
    "records_per_epoch": 0,
    "optimizations": Optimizations(),
}


def _entrypoint(value: Any) -> str | list[str] | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return value
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value
    raise ConfigRuleError([("", "must be a command string or a non-empty list of strings")])


FreeForm = dict[str, Any] | None


class ExperimentConfig(ConfigModel):
    """A validated experiment configuration. ``to_json_dict()`` is the stored form."""

    name: str | None = None
    description: str | None = None
    labels: list[str] = Field(default_factory=list)
    entrypoint: Annotated[str | list[str] | None, PlainValidator(_entrypoint)] = None
    hyperparameters: Hyperparameters = Field(default_factory=dict)
    searcher: SearcherConfig
    resources: Resources = Field(default_factory=Resources)
    checkpoint_storage: CheckpointStorage | None = None
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    max_restarts: Annotated[int, Field(ge=0)] = 5
    min_validation_period: Length = Field(default_factory=lambda: batches(0))
    min_checkpoint_period: Length = Field(default_factory=lambda: batches(0))
    scheduling_unit: Annotated[int, Field(ge=1)] = 100
    records_per_epoch: Annotated[int, Field(ge=0)] = 0
    perform_initial_validation: bool = False
    bind_mounts: list[BindMount] = Field(default_factory=list)
    environment: Environment = Field(default_factory=Environment)
    optimizations: Optimizations = Field(default_factory=Optimizations)
    profiling: Profiling = Field(default_factory=Profiling)
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    data: dict[str, Any] = Field(default_factory=dict)
    debug: bool = False
    workspace: str = ""
    project: str = ""
    log_policies: list[LogPolicy] = Field(default_factory=default_log_policies)
    retention_policy: RetentionPolicy | None = None
    preemption_timeout: Annotated[int, Field(ge=0)] | None = None
    integrations: FreeForm = None
    slurm: dict[str, Any] = Field(default_factory=dict)
    pbs: dict[str, Any] = Field(default_factory=dict)
    # Legacy sections: accepted and ignored.
    security: FreeForm = None
    tensorboard_storage: FreeForm = None
    data_layer: FreeForm = None
    internal: FreeForm = None

    @model_validator(mode="after")
    def _cross_section_rules(self, info: ValidationInfo) -> ExperimentConfig:
        problems: list[tuple[str, str]] = []
        if self.searcher.name == "grid":
            problems += [
                (f"hyperparameters.{path}", "grid search is in use but count was not provided")
                for path, hp in walk_ranges(self.hyperparameters)
                if hp.count is None
            ]
            too_many = grid_points_rule(grid_point_count(self.hyperparameters))
            if too_many:
                problems.append(("hyperparameters", too_many))
        if bool(self.workspace) != bool(self.project):
            problems.append(("", "workspace and project must both be included in config if one is provided"))
        context = info.context or {}
        if self.entrypoint is None and context.get("new_experiment") and not context.get("unmanaged"):
            problems.append(("entrypoint", "is required (managed experiments require entrypoint)"))
        raise_problems(problems)
        return self

    @property
    def is_legacy_trial(self) -> bool:
        """True for a ``module:Class`` entrypoint (a legacy Trial class)."""
        return is_legacy_trial(self.entrypoint)

    def launch_entrypoint(self) -> str | list[str] | None:
        """The command to run: a legacy ``module:Class`` entrypoint runs under the
        torch launcher, as Determined 0.38 rewrites it; anything else as written."""
        return launch_entrypoint(self.entrypoint)

    def warnings(self) -> list[str]:
        """Deprecations worth telling the user about; the config is still valid."""
        found = self.searcher.warnings()
        found += [
            f"{field} is deprecated (only the legacy Trial APIs use it)"
            for field, default in _DEPRECATED_DEFAULTS.items()
            if getattr(self, field) != default
        ]
        if self.is_legacy_trial:
            found.append(
                f"entrypoint {self.entrypoint!r} is a legacy Trial class; it runs as {self.launch_entrypoint()}"
            )
        return found

    def to_json_dict(self) -> dict[str, Any]:
        """The fully defaulted, JSON-able form that is stored and read by the services."""
        special = {"hyperparameters", "searcher", "checkpoint_storage", "min_validation_period",
                   "min_checkpoint_period"}  # fmt: skip
        data = self.model_dump(mode="json", exclude=special)
        data["hyperparameters"] = hyperparameters_to_json(self.hyperparameters)
        data["searcher"] = self.searcher.to_json()
        data["checkpoint_storage"] = self.checkpoint_storage.to_json() if self.checkpoint_storage else None
        data["min_validation_period"] = self.min_validation_period.to_json()
        data["min_checkpoint_period"] = self.min_checkpoint_period.to_json()
        return data
