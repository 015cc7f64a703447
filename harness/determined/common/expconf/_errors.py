"""Turning pydantic's validation errors into the messages users see.

Every message is ``<path>: <rule>`` (or an ``unknown field`` sentence), and
all problems of a config are reported together. This module is the one
place where pydantic's error vocabulary is translated.

Error tree::

    InvalidConfigError            the public error: every problem of one config, one line each
    ConfigRuleError(ValueError)   internal: raised inside validators with Problems whose
                                  paths are relative, re-rooted here at the validator's place
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

Loc = tuple[str | int, ...]


class InvalidConfigError(Exception):
    """The experiment configuration is invalid; ``errors`` holds one line per problem."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class Problem(NamedTuple):
    """One problem at a dotted ``path``: a broken ``rule``, or (when
    ``unknown_field`` is set) a key nobody expects there."""

    path: str
    rule: str = ""
    unknown_field: str = ""
    suggestion: str = ""

    def render(self) -> str:
        if not self.unknown_field:
            return f"{self.path}: {self.rule}" if self.path else self.rule
        place = f"in {self.path}" if self.path else "at top level"
        hint = f' (did you mean "{self.suggestion}"?)' if self.suggestion else ""
        return f'unknown field "{self.unknown_field}" {place}{hint}'

    def below(self, prefix: str) -> Problem:
        return self._replace(path=concat_path(prefix, self.path))


class ConfigRuleError(ValueError):
    """Raised by validators: problems with paths relative to the validated value."""

    def __init__(self, problems: Iterable[tuple[str, str] | Problem]) -> None:
        self.problems = [
            problem if isinstance(problem, Problem) else Problem(*problem) for problem in problems
        ]
        super().__init__("; ".join(problem.render() for problem in self.problems))


def dotted(loc: Loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def problems_from(exc: ValidationError, model: type[BaseModel]) -> list[Problem]:
    """Every error pydantic raised while validating ``model``, in our words."""
    problems: list[Problem] = []
    for error in exc.errors():
        loc: Loc = tuple(error["loc"])
        rule_error = (error.get("ctx") or {}).get("error")
        if isinstance(rule_error, ConfigRuleError):
            problems += [problem.below(dotted(loc)) for problem in rule_error.problems]
        elif error["type"] == "extra_forbidden":
            problems.append(_unknown_field(loc, model))
        else:
            problems.append(Problem(dotted(loc), _rule(error)))
    return problems


def messages_from(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    return [problem.render() for problem in problems_from(exc, model)]


def concat_path(prefix: str, path: str) -> str:
    if not prefix or not path:
        return prefix or path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def unknown_field(name: str, where: str, known: Sequence[str]) -> Problem:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return Problem(where, unknown_field=name, suggestion=close[0] if close else "")


def _unknown_field(loc: Loc, root: type[BaseModel]) -> Problem:
    owner = _model_at(root, loc[:-1])
    known = [name for name, field in owner.model_fields.items() if not field.exclude] if owner else []
    return unknown_field(str(loc[-1]), dotted(loc[:-1]), known)


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class that validated the value found at ``loc`` below ``root``."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the one interesting type."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


_TYPE_RULES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "missing": "is required",
}


def _rule(error: Any) -> str:
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    if kind in _TYPE_RULES:
        return _TYPE_RULES[kind]
    if kind == "literal_error":
        return (
            f"must be one of {ctx['expected'].replace(chr(39), chr(34))} (got {show_value(error['input'])})"
        )
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "less_than":
        return f"must be less than {ctx['lt']}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"])


def show_value(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)
