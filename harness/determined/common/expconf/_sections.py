"""The smaller top-level sections: profiling, optimizations (deprecated),
reproducibility, log policies and retention."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator

from determined.common.expconf._base import ConfigModel, raise_problems
from determined.common.expconf._errors import ConfigRuleError


class Profiling(ConfigModel):
    enabled: bool = False
    begin_on_batch: Annotated[int, Field(ge=0)] = 0
    end_after_batch: Annotated[int, Field(ge=0)] | None = None
    sync_timings: bool = True

    @model_validator(mode="after")
    def _ordered(self) -> Profiling:
        if self.end_after_batch is not None and self.begin_on_batch > self.end_after_batch:
            raise_problems([("", "begin_on_batch must not be greater than end_after_batch")])
        return self


class Optimizations(ConfigModel):
    """Deprecated knobs of the legacy Trial APIs."""

    aggregation_frequency: Annotated[int, Field(ge=1)] = 1
    average_aggregated_gradients: bool = True
    average_training_metrics: bool = True
    gradient_compression: bool = False
    mixed_precision: Literal["O0", "O1", "O2", "O3"] = "O0"
    tensor_fusion_threshold: Annotated[int, Field(ge=1)] = 64
    tensor_fusion_cycle_time: Annotated[int, Field(ge=1)] = 1
    auto_tune_tensor_fusion: bool = False
    grad_updates_size_file: str | None = None


class Reproducibility(ConfigModel):
    experiment_seed: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = None


LogAction = Literal["cancel_retries", "exclude_node"]
_ACTIONS = ("cancel_retries", "exclude_node")


def _log_action(value: Any) -> LogAction | None:
    """Accepts the action as a string or in the legacy ``{type: ...}`` form."""
    if isinstance(value, dict) and set(value) == {"type"}:
        value = value["type"]
    if value is None or value in _ACTIONS:
        return value  # type: ignore[no-any-return]
    raise ConfigRuleError([("", 'must be "cancel_retries" or "exclude_node"')])


class LogPolicy(ConfigModel):
    name: str | None = None
    pattern: str | None = None
    action: Annotated[LogAction | None, PlainValidator(_log_action)] = None


def default_log_policies() -> list[LogPolicy]:
    return [
        LogPolicy(name="CUDA OOM", pattern=".*CUDA out of memory.*"),
        LogPolicy(name="ECC Error", pattern=".*uncorrectable ECC error encountered.*"),
    ]


class RetentionPolicy(ConfigModel):
    log_retention_days: Annotated[int, Field(ge=-1, le=32767)] | None = None
