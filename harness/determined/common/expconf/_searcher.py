"""The ``searcher`` section: one model for every search method, with the
fields each method accepts checked after parsing (the stored form only
carries the fields of the chosen method)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, model_validator

from determined.common.expconf._base import ConfigModel, raise_problems
from determined.common.expconf._errors import ConfigRuleError
from determined.common.expconf._lengths import Length, SearcherLength

SearcherName = Literal[
    "single", "random", "grid", "async_halving", "adaptive_asha",
    "custom", "adaptive", "adaptive_simple", "sync_halving",
]  # fmt: skip
LEGACY_SEARCHERS = frozenset({"custom", "adaptive", "adaptive_simple", "sync_halving"})
ASHA_SEARCHERS = frozenset({"async_halving", "adaptive_asha"})

_COMMON = ("name", "metric", "smaller_is_better", "source_trial_id", "source_checkpoint_uuid", "max_length")
_ASHA = ("max_trials", "divisor", "max_concurrent_trials", "time_metric", "max_time", "stop_once")
FIELDS_BY_SEARCHER: dict[str, tuple[str, ...]] = {
    "single": _COMMON,
    "random": _COMMON + ("max_trials", "max_concurrent_trials"),
    "grid": _COMMON + ("max_concurrent_trials",),
    "async_halving": _COMMON + ("num_rungs",) + _ASHA,
    "adaptive_asha": _COMMON + ("mode", "max_rungs", "bracket_rungs") + _ASHA,
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "random": ("max_trials",),
    "async_halving": ("num_rungs", "max_trials"),
    "adaptive_asha": ("max_trials",),
}

PositiveInt = Annotated[int, Field(ge=1)]


class SearcherConfig(ConfigModel):
    name: SearcherName
    metric: str | None = None
    smaller_is_better: bool = True
    source_trial_id: int | None = None
    source_checkpoint_uuid: str | None = None
    max_length: SearcherLength | None = None
    max_trials: PositiveInt | None = None
    max_concurrent_trials: Annotated[int, Field(ge=0)] = 16
    num_rungs: PositiveInt | None = None
    divisor: Annotated[float, Field(gt=1)] = 4.0
    mode: Literal["aggressive", "standard", "conservative"] = "standard"
    max_rungs: PositiveInt = 5
    bracket_rungs: list[int] = Field(default_factory=list)
    time_metric: str | None = None
    max_time: PositiveInt | None = None
    stop_once: bool = False
    # Fields only the removed searchers had; parsed so old configs load.
    budget: Any = None
    train_stragglers: Any = None
    max_steps: Any = None
    target_trial_steps: Any = None
    unit: Any = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_removed(cls, data: Any, info: ValidationInfo) -> Any:
        name = data.get("name") if isinstance(data, dict) else None
        if name == "pbt":  # gone for good: not even old configs using it can be read
            raise ConfigRuleError([("name", "the `pbt` searcher has been removed")])
        if name in LEGACY_SEARCHERS and (info.context or {}).get("new_experiment"):
            raise ConfigRuleError(
                [("name", f"the `{name}` searcher has been removed and is not valid for new experiments")]
            )
        return data

    @model_validator(mode="after")
    def _method_rules(self) -> SearcherConfig:
        allowed = self.accepted_fields
        problems = [
            (field, f"is not a field of the {self.name} searcher")
            for field in sorted(self.model_fields_set - set(allowed))
        ]
        problems += [(field, "is required") for field in self._missing()]
        if self.source_trial_id is not None and self.source_checkpoint_uuid is not None:
            problems.append(("", "use at most one of source_trial_id and source_checkpoint_uuid"))
        if self.name in ASHA_SEARCHERS and not self._has_asha_length():
            problems.append(
                ("", f"the `{self.name}` searcher requires `max_time` and `time_metric` to be set")
            )
        raise_problems(problems)
        return self

    def _missing(self) -> list[str]:
        required = ("metric",) + _REQUIRED.get(self.name, ())
        return [field for field in required if getattr(self, field) is None]

    def _has_asha_length(self) -> bool:
        """0.38 needs time_metric + max_time; seed-era configs give max_length instead."""
        if (self.time_metric is None) != (self.max_time is None):
            return False
        return self.time_metric is not None or self.max_length is not None

    @property
    def accepted_fields(self) -> tuple[str, ...]:
        """The fields the chosen search method accepts (all, for removed methods)."""
        return FIELDS_BY_SEARCHER.get(self.name, tuple(SearcherConfig.model_fields))

    def asha_time(self) -> tuple[str, int] | None:
        """(time metric, max time) for ASHA: ``time_metric``/``max_time``, or the
        legacy ``max_length`` read as that many units (a bare int counts batches)."""
        if self.time_metric is not None and self.max_time is not None:
            return self.time_metric, self.max_time
        if isinstance(self.max_length, Length):
            return self.max_length.unit, self.max_length.value
        if isinstance(self.max_length, int):
            return "batches", self.max_length
        return None

    def warnings(self) -> list[str]:
        found: list[str] = []
        if self.max_length is not None:
            found.append("searcher.max_length is deprecated: the training code decides how long to train")
            if self.name in ASHA_SEARCHERS and self.time_metric is None:
                found.append(
                    f"searcher: the `{self.name}` searcher uses max_length because time_metric and "
                    "max_time are not set (Determined 0.38 would require them)"
                )
        if self.stop_once:
            found.append("searcher.stop_once is deprecated and ignored")
        return found

    def to_json(self) -> dict[str, Any]:
        return {field: _json(getattr(self, field)) for field in self.accepted_fields}


def _json(value: Any) -> Any:
    return value.to_json() if isinstance(value, Length) else value
