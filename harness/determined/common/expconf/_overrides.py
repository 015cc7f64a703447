"""``det ... --config key.sub=value`` overrides (``parse_config_overrides`` in
Determined's CLI): dotted keys become nested maps, values are read as YAML,
a comma makes a list unless the value starts with ``[`` or ``{``, and the
result is merged recursively over the file's mapping."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from determined.common.expconf._errors import InvalidConfigError
from determined.common.expconf._yaml import parse_yaml


def apply_overrides(config: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A new mapping: ``config`` with every ``key.sub=value`` override merged in.
    Raises InvalidConfigError listing every malformed override."""
    merged: dict[str, Any] = copy.deepcopy(dict(config))
    errors: list[str] = []
    for override in overrides:
        try:
            keys, value = _parse(override)
        except InvalidConfigError as exc:
            errors += exc.errors
            continue
        _merge(merged, _nest(keys, value))
    if errors:
        raise InvalidConfigError(errors)
    return merged


def merged_config(config: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """A new mapping: ``update`` merged recursively over ``config`` (as
    ``det experiment continue --config-file`` merges its file over the
    experiment's config: mappings key by key, anything else replaced)."""
    merged: dict[str, Any] = copy.deepcopy(dict(config))
    _merge(merged, update)
    return merged


def _parse(override: str) -> tuple[list[str], Any]:
    key, sep, text = override.partition("=")
    keys = key.strip().split(".")
    if not sep or not all(part.strip() for part in keys):
        raise InvalidConfigError([f'invalid config override "{override}": expected KEY.SUB=VALUE'])
    try:
        value = _value(text.strip())
    except InvalidConfigError as exc:
        raise InvalidConfigError([f'invalid config override "{override}": {exc.errors[0]}']) from None
    if keys == ["bind_mounts"] and isinstance(value, dict):
        value = [value]
    return [part.strip() for part in keys], value


def _value(text: str) -> Any:
    if "," in text and not text.startswith(("[", "{")):
        return [parse_yaml(item.strip()) for item in text.split(",")]
    return parse_yaml(text)


def _nest(keys: list[str], value: Any) -> dict[str, Any]:
    for key in reversed(keys):
        value = {key: value}
    return value  # type: ignore[no-any-return]


def _merge(target: dict[str, Any], update: Mapping[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
