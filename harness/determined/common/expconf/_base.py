"""The base of every configuration model: strict types, no unknown keys,
immutable once loaded."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, PlainSerializer, ValidationError

from determined.common.expconf._errors import ConfigRuleError, Problem, problems_from

Model = TypeVar("Model", bound=BaseModel)


class ConfigModel(BaseModel):
    # defer_build: schemas are built on first use, keeping `import` cheap for the CLI.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


def validate_part(model: type[Model], value: Any) -> Model:
    """Validate ``value`` as ``model`` inside another validator, re-raising
    the problems with paths relative to ``value``."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ConfigRuleError(problems_from(exc, model)) from None


def raise_problems(problems: list[tuple[str, str]] | list[Problem]) -> None:
    """Raise one ConfigRuleError listing every (path, rule) problem, if any."""
    if problems:
        raise ConfigRuleError(problems)


def _to_jsonable(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


# Fields validated by a PlainValidator into "a model or a plain value" need
# this: pydantic's own serializer for such unions warns and mis-serializes.
AsJson = PlainSerializer(_to_jsonable)
