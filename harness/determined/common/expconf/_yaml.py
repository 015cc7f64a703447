"""Reading YAML the way Determined's Go side does, as near as matters:
``1e-4`` is a float (YAML 1.2), dates stay strings, a key given twice is
an error, and syntax errors name the line."""

from __future__ import annotations

import re
from typing import Any

import yaml

from determined.common.expconf._errors import InvalidConfigError

_FLOAT = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
    r"|[0-9][0-9_]*[eE][-+]?[0-9]+|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_REPLACED_TAGS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")


class _ConfigLoader(yaml.SafeLoader):  # type: ignore[misc]
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise InvalidConfigError([f'invalid YAML at line {line}: key "{key}" is given twice'])
            seen.add(key)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _REPLACED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


def parse_yaml(text: str | bytes) -> Any:
    """Parse YAML (or JSON), raising InvalidConfigError that names the line."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidConfigError([f"invalid YAML{where}: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise InvalidConfigError([f"invalid YAML: {exc}"]) from None
