"""Reading YAML the way Determined's Go side does, as near as matters:
``1e-4`` is a float (YAML 1.2), dates stay strings, a key given twice is
an error, and syntax errors name the line.

Within the limits of `_limits.py`: the text's size before parsing, the nesting depth
while composing (PyYAML's composer recurses), and the values with aliases expanded on
the composed nodes, before anything is constructed (an alias is composed once however
often it is used, so a small text can stand for an enormous tree).

Where PyYAML has its C extension (libyaml), that scans and parses (no recursion there),
about seven times faster; composing, where the limits are checked, and constructing
stay PyYAML's Python code either way. A text libyaml refuses is read again by PyYAML's
own parser, so that errors read the same with or without libyaml."""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from determined.common.expconf._errors import InvalidConfigError
from determined.common.expconf._limits import (
    MAX_CONFIG_DEPTH,
    check_config_size,
    check_expanded_size,
    depth_exceeded,
)

_FLOAT = re.compile(
    r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
    r"|[0-9][0-9_]*[eE][-+]?[0-9]+|\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_REPLACED_TAGS = ("tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp")


class _ConfigComposer(Composer, SafeConstructor, Resolver):  # type: ignore[misc]
    """The Python composer, counting the nesting depth as it goes and checking the
    expanded size of what it composed before anything is constructed."""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        opens = 1 if self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent) else 0
        self._depth += opens
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise depth_exceeded(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= opens

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            check_expanded_size(node, _node_children)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                line = key_node.start_mark.line + 1
                raise InvalidConfigError([f'invalid YAML at line {line}: key "{key}" is given twice'])
            seen.add(key)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


_ConfigComposer.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _REPLACED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigComposer.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))


class _PythonLoader(Reader, Scanner, Parser, _ConfigComposer):  # type: ignore[misc]
    def __init__(self, stream: Any) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML without libyaml
    _FastLoader: type | None = None
else:

    class _FastLoader(_ConfigComposer, CParser):  # type: ignore[misc,no-redef]
        """libyaml scans and parses; the composer before it in line is the Python one."""

        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


def _node_children(node: yaml.Node) -> list[yaml.Node] | None:
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return None


def parse_yaml(text: str | bytes) -> Any:
    """Parse YAML (or JSON), raising InvalidConfigError that names the line, or the
    limit (`_limits.py`) the text goes past."""
    check_config_size(text)
    if _FastLoader is not None:
        try:
            return yaml.load(text, Loader=_FastLoader)
        except yaml.YAMLError:
            pass  # told in PyYAML's words below, the same with or without libyaml
    try:
        return yaml.load(text, Loader=_PythonLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InvalidConfigError([f"invalid YAML{where}: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise InvalidConfigError([f"invalid YAML: {exc}"]) from None
