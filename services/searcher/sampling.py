"""Drawing hyperparameter values from the stored (typed) hyperparameter form.

Pure and seeded: the caller hands in the experiment's ``random.Random``.
Names are visited in sorted order at every depth, so the same seed always
gives the same trials (Determined iterates nested groups in random order;
sorting them is our deliberate fix)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from typing import Any

Route = tuple[str, ...]


def sample_hparams(hyperparameters_json: Mapping[str, Any], rng: random.Random) -> dict[str, Any]:
    """One random value per hyperparameter (nested groups give nested dicts)."""
    return {name: _sample(hyperparameters_json[name], rng) for name in sorted(hyperparameters_json)}


def _sample(spec: Mapping[str, Any], rng: random.Random) -> Any:
    kind = spec["type"]
    if kind == "const":
        return spec["val"]
    if kind == "int":
        return spec["minval"] + rng.randrange(spec["maxval"] - spec["minval"] + 1)
    if kind == "double":
        return _uniform(spec["minval"], spec["maxval"], rng)
    if kind == "log":
        return spec["base"] ** _uniform(spec["minval"], spec["maxval"], rng)
    if kind == "categorical":
        return spec["vals"][rng.randrange(len(spec["vals"]))]
    if kind == "object":
        return sample_hparams(spec["vals"], rng)
    raise ValueError(f"unknown hyperparameter type {kind!r}")


def _uniform(low: float, high: float, rng: random.Random) -> float:
    return low + (high - low) * rng.random()


def grid_points(hyperparameters_json: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every point of the grid: the cartesian product of one axis per leaf
    hyperparameter (sorted names; the first axis varies slowest)."""
    axes = _axes(hyperparameters_json, ())
    routes = [route for route, _ in axes]
    return [_assemble(routes, values) for values in itertools.product(*(values for _, values in axes))]


def grid_size(hyperparameters_json: Mapping[str, Any]) -> int:
    """How many points `grid_points` has, without building them."""
    return math.prod(len(values) for _, values in _axes(hyperparameters_json, ()))


def grid_point(hyperparameters_json: Mapping[str, Any], index: int) -> dict[str, Any]:
    """`grid_points(...)[index]`, without building the others."""
    axes = _axes(hyperparameters_json, ())
    chosen: list[Any] = []
    for _, values in reversed(axes):  # the last axis varies fastest
        index, position = divmod(index, len(values))
        chosen.append(values[position])
    return _assemble([route for route, _ in axes], tuple(reversed(chosen)))


def _axes(hparams: Mapping[str, Any], prefix: Route) -> list[tuple[Route, list[Any]]]:
    axes: list[tuple[Route, list[Any]]] = []
    for name in sorted(hparams):
        spec, route = hparams[name], prefix + (name,)
        if spec["type"] != "object":
            axes.append((route, axis_values(spec)))
        elif spec["vals"]:
            axes += _axes(spec["vals"], route)
        else:
            axes.append((route, [{}]))
    return axes


def axis_values(spec: Mapping[str, Any]) -> list[Any]:
    """The grid values of one leaf hyperparameter (``count`` must be set for ranges)."""
    kind = spec["type"]
    if kind == "const":
        return [spec["val"]]
    if kind == "categorical":
        return list(spec["vals"])
    low, high = spec["minval"], spec["maxval"]
    if kind == "int":
        count = min(spec["count"], high - low + 1)
        return [_round_half_away(value) for value in _spaced(low, high, count)]
    values = _spaced(low, high, spec["count"])
    return [spec["base"] ** value for value in values] if kind == "log" else values


def _spaced(low: float, high: float, count: int) -> list[float]:
    if count == 1:
        return [(low + high) / 2]
    return [low + index * (high - low) / (count - 1) for index in range(count)]


def _round_half_away(value: float) -> int:
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def _assemble(routes: list[Route], values: tuple[Any, ...]) -> dict[str, Any]:
    point: dict[str, Any] = {}
    for route, value in zip(routes, values, strict=True):
        group = point
        for key in route[:-1]:
            group = group.setdefault(key, {})
        group[route[-1]] = value
    return point
