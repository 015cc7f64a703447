"""Reported metrics as TensorBoard scalars, tagged as Determined tags them: a validation
metric gets a `val_` prefix unless its name starts with `val`."""

import math
import numbers
from collections.abc import Mapping
from typing import Any, Protocol


class ScalarWriter(Protocol):
    """The part of `tensorboardX.SummaryWriter` used here."""

    def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None: ...

    def flush(self) -> None: ...


def tensorboard_tag(group: str, name: str) -> str:
    if group == "validation" and not name.startswith("val"):
        return f"val_{name}"
    return name


def scalars(group: str, metrics: Mapping[str, Any]) -> dict[str, float]:
    """{tag: value} of every finite number of `metrics` (not a bool); the rest (strings,
    lists, None) is not a scalar and is left out."""
    return {
        tensorboard_tag(group, name): float(value)
        for name, value in metrics.items()
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    }


def write_scalars(writer: ScalarWriter, group: str, steps_completed: int, metrics: Mapping[str, Any]) -> None:
    """The scalars of `metrics` at `steps_completed`, flushed."""
    for tag, value in scalars(group, metrics).items():
        writer.add_scalar(tag, value, steps_completed)
    writer.flush()
