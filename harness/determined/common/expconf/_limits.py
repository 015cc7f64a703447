"""How large an experiment configuration may be: the one place its limits live.

Each limit is checked before the work it bounds: the size before parsing, the nesting
depth while YAML is composed (before Python would run out of stack), the number of
values after alias expansion on the composed YAML (before anything is built from it, so
that a few hundred bytes of nested aliases cannot expand to gigabytes), and the
hyperparameter values before a search expands them. The CLI checks them first and the
gateway again; a refusal is one sentence naming the limit and the value found.

=============================  =========  ==============================================
limit                          value      what it counts
=============================  =========  ==============================================
MAX_CONFIG_BYTES               1 MiB      the config's text, UTF-8 encoded
MAX_CONFIG_DEPTH               64         mappings and lists nested in one another
MAX_CONFIG_VALUES              250,000    mappings, lists and scalars, aliases expanded
MAX_HYPERPARAMETER_VALUES      10,000     a categorical's vals; a range's count
MAX_GRID_POINTS                100,000    the points (trials) of a grid search
=============================  =========  ==============================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from determined.common.expconf._errors import InvalidConfigError

MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_DEPTH = 64
MAX_CONFIG_VALUES = 250_000
MAX_HYPERPARAMETER_VALUES = 10_000
MAX_GRID_POINTS = 100_000
# Grid points are counted exactly up to here (a grid's size is a product and can be astronomical).
GRID_COUNT_CAP = 10**15

Node = TypeVar("Node")


def check_config_size(text: str | bytes) -> None:
    """Refuses a config text over MAX_CONFIG_BYTES (checked before it is parsed)."""
    size = len(text) if isinstance(text, bytes) else _utf8_size(text)
    if size > MAX_CONFIG_BYTES:
        raise size_exceeded(size)


def size_exceeded(size: int) -> InvalidConfigError:
    """The refusal of a config of `size` bytes, over MAX_CONFIG_BYTES (a file's size can
    be checked before it is read)."""
    return InvalidConfigError(
        [
            (
                f"the experiment configuration is {_bytes(size)} ({size} bytes); at most"
                f" {_bytes(MAX_CONFIG_BYTES)} ({MAX_CONFIG_BYTES} bytes) is allowed"
            )
        ]
    )


def depth_exceeded(line: int | None = None) -> InvalidConfigError:
    """The refusal of a config nested deeper than MAX_CONFIG_DEPTH."""
    where = f" (at line {line})" if line is not None else " (counting what each alias stands for)"
    return InvalidConfigError(
        [
            (
                f"the experiment configuration nests mappings and lists more than {MAX_CONFIG_DEPTH} levels"
                f" deep{where}; at most {MAX_CONFIG_DEPTH} are allowed"
            )
        ]
    )


def check_config_value(value: Any) -> None:
    """Refuses an already-parsed config (a mapping from the SDK, or a parsed document)
    nested deeper than MAX_CONFIG_DEPTH or holding more than MAX_CONFIG_VALUES values
    when shared or repeated parts are counted each time they appear. Stops counting at
    the limit, so a structure that refers to itself is refused, not walked forever."""
    check_expanded_size(value, _python_children)


def check_expanded_size(root: Node, children: Callable[[Node], Iterable[Node] | None]) -> None:
    """Walks `root` as the tree it stands for (a node reached twice is counted twice),
    `children(node)` giving a node's children (None for a scalar); refuses it past
    MAX_CONFIG_DEPTH levels or MAX_CONFIG_VALUES values. Costs at most MAX_CONFIG_VALUES
    steps however large the tree would be."""
    count = 0
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise InvalidConfigError(
                [
                    (
                        f"the experiment configuration holds more than {MAX_CONFIG_VALUES} values"
                        " (mappings, lists and scalars, counting each alias as a copy of what it names);"
                        f" at most {MAX_CONFIG_VALUES} are allowed"
                    )
                ]
            )
        inner = children(node)
        if inner is None:
            continue
        if depth > MAX_CONFIG_DEPTH:
            raise depth_exceeded()
        stack.extend((child, depth + 1) for child in inner)


def hyperparameter_values_rule(count: int, verb: str = "has") -> str | None:
    """The rule a hyperparameter breaks with `count` values ("has" them, "asks for" them), or None."""
    if count <= MAX_HYPERPARAMETER_VALUES:
        return None
    return f"{verb} {count} values; one hyperparameter may have at most {MAX_HYPERPARAMETER_VALUES}"


def grid_points_rule(points: int) -> str | None:
    """The rule a grid of `points` points breaks, or None."""
    if points <= MAX_GRID_POINTS:
        return None
    found = f"{points}" if points <= GRID_COUNT_CAP else f"more than {GRID_COUNT_CAP}"
    return f"the grid search has {found} points (trials); at most {MAX_GRID_POINTS} are allowed"


def _python_children(value: Any) -> Iterable[Any] | None:
    if isinstance(value, Mapping):
        return [item for pair in value.items() for item in pair]
    if isinstance(value, list | tuple):
        return value
    return None


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _bytes(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} bytes"
