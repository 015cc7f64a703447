"""Hyperparameters: constants (also as shorthand), ranges, categorical
choices and nested groups of any depth.

The stored form is always typed: ``{name: {"type": "const", "val": ...}}``,
``{"type": "int", "minval": .., "maxval": .., "count": ..}`` and so on, with
groups as ``{"type": "object", "vals": {...}}``. Loading the stored form
again gives the same hyperparameters."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator

from determined.common.expconf._base import ConfigModel, raise_problems, validate_part
from determined.common.expconf._errors import ConfigRuleError, Problem, show_value
from determined.common.expconf._limits import GRID_COUNT_CAP, hyperparameter_values_rule

Count = Annotated[int, Field(ge=1)] | None


class ConstHyperparameter(ConfigModel):
    type: Literal["const"] = "const"
    val: Any


class _Range(ConfigModel):
    @model_validator(mode="after")
    def _ordered(self) -> _Range:
        minval, maxval = getattr(self, "minval"), getattr(self, "maxval")  # noqa: B009 - set by subclasses
        if minval >= maxval:
            raise ConfigRuleError([("", f"minval ({minval}) must be less than maxval ({maxval})")])
        count: int | None = getattr(self, "count")  # noqa: B009 - set by subclasses
        rule = hyperparameter_values_rule(count or 0, "asks for")
        if rule:
            raise ConfigRuleError([("count", rule)])
        return self


class IntHyperparameter(_Range):
    type: Literal["int"] = "int"
    minval: int
    maxval: int
    count: Count = None


class DoubleHyperparameter(_Range):
    type: Literal["double"] = "double"
    minval: float
    maxval: float
    count: Count = None


class LogHyperparameter(_Range):
    """Values are ``base ** u`` with ``u`` uniform in [minval, maxval]."""

    type: Literal["log"] = "log"
    minval: float
    maxval: float
    base: Annotated[float, Field(gt=0)]
    count: Count = None


class CategoricalHyperparameter(ConfigModel):
    type: Literal["categorical"] = "categorical"
    vals: Annotated[list[Any], Field(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _not_too_many(cls, data: Any) -> Any:
        vals = data.get("vals") if isinstance(data, Mapping) else None
        rule = hyperparameter_values_rule(len(vals)) if isinstance(vals, list) else None
        if rule:
            raise ConfigRuleError([("vals", rule)])
        return data


class HyperparameterGroup(ConfigModel):
    """A nested group; its sampled value is a dict."""

    type: Literal["object"] = "object"
    vals: Hyperparameters


Hyperparameter = (
    ConstHyperparameter
    | IntHyperparameter
    | DoubleHyperparameter
    | LogHyperparameter
    | CategoricalHyperparameter
    | HyperparameterGroup
)
RangeHyperparameter = IntHyperparameter | DoubleHyperparameter | LogHyperparameter

_BY_TYPE: dict[str, type[ConfigModel]] = {
    "const": ConstHyperparameter,
    "int": IntHyperparameter,
    "double": DoubleHyperparameter,
    "log": LogHyperparameter,
    "categorical": CategoricalHyperparameter,
}


def parse_hyperparameters(value: Any) -> dict[str, Hyperparameter]:
    """Validate a whole hyperparameter map, reporting every bad entry."""
    if not isinstance(value, Mapping):
        raise ConfigRuleError([("", "must be a mapping of names to hyperparameters")])
    parsed: dict[str, Hyperparameter] = {}
    problems: list[Problem] = []
    for name, spec in value.items():
        try:
            parsed[str(name)] = _parse_one(spec)
        except ConfigRuleError as exc:
            problems += [problem.below(str(name)) for problem in exc.problems]
    raise_problems(problems)
    return parsed


def _parse_one(spec: Any) -> Hyperparameter:
    if isinstance(spec, ConfigModel):
        return spec  # type: ignore[return-value]
    if not isinstance(spec, Mapping):
        return ConstHyperparameter(val=spec)
    if "type" not in spec:
        return HyperparameterGroup(vals=parse_hyperparameters(spec))
    kind = spec["type"]
    if kind == "object":
        rest = {key: item for key, item in spec.items() if key not in ("type", "vals")}
        if rest or not isinstance(spec.get("vals"), Mapping):
            raise ConfigRuleError([("", 'a group with type "object" needs only a "vals" mapping')])
        return HyperparameterGroup(vals=parse_hyperparameters(spec["vals"]))
    model = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if model is None:
        known = ", ".join(f'"{name}"' for name in _BY_TYPE)
        raise ConfigRuleError([("type", f'must be one of {known} or "object" (got {show_value(kind)})')])
    return validate_part(model, spec)  # type: ignore[return-value]


Hyperparameters = Annotated[dict[str, Hyperparameter], PlainValidator(parse_hyperparameters)]


def hyperparameters_to_json(hparams: Mapping[str, Hyperparameter]) -> dict[str, Any]:
    return {name: _to_json(hp) for name, hp in hparams.items()}


def _to_json(hp: Hyperparameter) -> dict[str, Any]:
    if isinstance(hp, HyperparameterGroup):
        return {"type": "object", "vals": hyperparameters_to_json(hp.vals)}
    return hp.model_dump(mode="json")


def grid_point_count(hparams: Mapping[str, Hyperparameter]) -> int:
    """How many points a grid search over `hparams` has (as the searcher expands it: an
    int range gives at most one point per integer), counted only up to just past
    GRID_COUNT_CAP. Ranges without a count are counted as one point (refused elsewhere)."""
    points = 1
    for hp in hparams.values():
        if isinstance(hp, HyperparameterGroup):
            points *= grid_point_count(hp.vals)
        elif isinstance(hp, CategoricalHyperparameter):
            points *= len(hp.vals)
        elif isinstance(hp, IntHyperparameter):
            points *= min(hp.count or 1, hp.maxval - hp.minval + 1)
        elif isinstance(hp, DoubleHyperparameter | LogHyperparameter):
            points *= hp.count or 1
        if points > GRID_COUNT_CAP:
            return GRID_COUNT_CAP + 1
    return points


def walk_ranges(
    hparams: Mapping[str, Hyperparameter], prefix: str = ""
) -> Iterator[tuple[str, RangeHyperparameter]]:
    """Every int/double/log hyperparameter with its dotted path, nested ones too."""
    for name, hp in hparams.items():
        path = f"{prefix}{name}"
        if isinstance(hp, HyperparameterGroup):
            yield from walk_ranges(hp.vals, path + ".")
        elif isinstance(hp, IntHyperparameter | DoubleHyperparameter | LogHyperparameter):
            yield path, hp
