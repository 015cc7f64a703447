"""Drawing hyperparameter values from the typed hyperparameters
(``ExperimentConfig.hyperparameters``), giving plain dicts of values.

Pure and seeded: the caller hands in the experiment's ``random.Random``.
Names are visited in sorted order at every depth, so the same seed always
gives the same trials (Determined iterates nested groups in random order;
sorting them is our deliberate fix). The draws are those of the stored JSON
form, call for call, so recorded event logs replay unchanged.

Const and categorical values are handed out as deep copies, so a caller
that changes a sampled dict never reaches into the (frozen) config."""

from __future__ import annotations

import copy
import itertools
import math
import random
from collections.abc import Mapping
from typing import Any, assert_never

from determined.common.expconf import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    Hyperparameter,
    HyperparameterGroup,
    IntHyperparameter,
    LogHyperparameter,
)

Route = tuple[str, ...]
Hyperparameters = Mapping[str, Hyperparameter]
LeafHyperparameter = (
    ConstHyperparameter
    | IntHyperparameter
    | DoubleHyperparameter
    | LogHyperparameter
    | CategoricalHyperparameter
)


def sample_hparams(hyperparameters: Hyperparameters, rng: random.Random) -> dict[str, Any]:
    """One random value per hyperparameter (nested groups give nested dicts)."""
    return {name: _sample(hyperparameters[name], rng) for name in sorted(hyperparameters)}


def _sample(hp: Hyperparameter, rng: random.Random) -> Any:
    if isinstance(hp, ConstHyperparameter):
        return copy.deepcopy(hp.val)
    if isinstance(hp, IntHyperparameter):
        return hp.minval + rng.randrange(hp.maxval - hp.minval + 1)
    if isinstance(hp, DoubleHyperparameter):
        return _uniform(hp.minval, hp.maxval, rng)
    if isinstance(hp, LogHyperparameter):
        return hp.base ** _uniform(hp.minval, hp.maxval, rng)
    if isinstance(hp, CategoricalHyperparameter):
        return copy.deepcopy(hp.vals[rng.randrange(len(hp.vals))])
    if isinstance(hp, HyperparameterGroup):
        return sample_hparams(hp.vals, rng)
    assert_never(hp)


def _uniform(low: float, high: float, rng: random.Random) -> float:
    return low + (high - low) * rng.random()


def grid_points(hyperparameters: Hyperparameters) -> list[dict[str, Any]]:
    """Every point of the grid: the cartesian product of one axis per leaf
    hyperparameter (sorted names; the first axis varies slowest)."""
    axes = _axes(hyperparameters, ())
    routes = [route for route, _ in axes]
    return [_assemble(routes, values) for values in itertools.product(*(values for _, values in axes))]


def grid_size(hyperparameters: Hyperparameters) -> int:
    """How many points `grid_points` has, without building them."""
    return math.prod(len(values) for _, values in _axes(hyperparameters, ()))


def grid_point(hyperparameters: Hyperparameters, index: int) -> dict[str, Any]:
    """`grid_points(...)[index]`, without building the others."""
    axes = _axes(hyperparameters, ())
    chosen: list[Any] = []
    for _, values in reversed(axes):  # the last axis varies fastest
        index, position = divmod(index, len(values))
        chosen.append(values[position])
    return _assemble([route for route, _ in axes], tuple(reversed(chosen)))


def _axes(hyperparameters: Hyperparameters, prefix: Route) -> list[tuple[Route, list[Any]]]:
    axes: list[tuple[Route, list[Any]]] = []
    for name in sorted(hyperparameters):
        hp, route = hyperparameters[name], prefix + (name,)
        if not isinstance(hp, HyperparameterGroup):
            axes.append((route, axis_values(hp)))
        elif hp.vals:
            axes += _axes(hp.vals, route)
        else:
            axes.append((route, [{}]))
    return axes


def axis_values(hp: LeafHyperparameter) -> list[Any]:
    """The grid values of one leaf hyperparameter (``count`` must be set for ranges)."""
    if isinstance(hp, ConstHyperparameter):
        return [hp.val]
    if isinstance(hp, CategoricalHyperparameter):
        return list(hp.vals)
    if hp.count is None:
        raise ValueError(f"a {hp.type} hyperparameter needs a count to be searched on a grid")
    if isinstance(hp, IntHyperparameter):
        count = min(hp.count, hp.maxval - hp.minval + 1)
        return [_round_half_away(value) for value in _spaced(hp.minval, hp.maxval, count)]
    values = _spaced(hp.minval, hp.maxval, hp.count)
    if isinstance(hp, LogHyperparameter):
        return [hp.base**value for value in values]
    return values


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
        group[route[-1]] = copy.deepcopy(value)
    return point
