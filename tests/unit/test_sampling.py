"""Sampling hyperparameters and enumerating grid points from the typed
hyperparameters (`ExperimentConfig.hyperparameters`)."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.common.expconf import (
    CategoricalHyperparameter,
    DoubleHyperparameter,
    Hyperparameter,
    IntHyperparameter,
    LogHyperparameter,
    load_config,
)
from services.searcher.sampling import axis_values, grid_point, grid_points, grid_size, sample_hparams


def typed(hyperparameters: dict[str, Any]) -> dict[str, Hyperparameter]:
    """The typed hyperparameters a config with these (stored or shorthand) ones has."""
    return load_config(
        {
            "searcher": {"name": "random", "metric": "loss", "max_trials": 5},
            "hyperparameters": hyperparameters,
        },
        new_experiment=False,
    ).hyperparameters


STORED = typed(
    {
        "global_batch_size": 64,
        "layers": {"type": "int", "minval": 1, "maxval": 3},
        "dropout": {"type": "double", "minval": 0.2, "maxval": 0.8},
        "lr": {"type": "log", "minval": -4, "maxval": -1, "base": 10},
        "act": {"type": "categorical", "vals": ["relu", "gelu", None]},
        "optimizer": {"momentum": {"type": "double", "minval": 0, "maxval": 1}, "inner": {"name": "sgd"}},
    }
)


def _trials(seed: int, count: int = 5) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [sample_hparams(STORED, rng) for _ in range(count)]


def test_the_same_seed_gives_the_same_trials() -> None:
    assert _trials(42) == _trials(42)
    assert _trials(42) != _trials(43)


def test_sampled_values_respect_each_type() -> None:
    for trial in _trials(1, 200):
        assert trial["global_batch_size"] == 64
        assert trial["layers"] in (1, 2, 3)
        assert 0.2 <= trial["dropout"] <= 0.8
        assert 1e-4 <= trial["lr"] <= 1e-1
        assert trial["act"] in ("relu", "gelu", None)
        assert 0 <= trial["optimizer"]["momentum"] <= 1
        assert trial["optimizer"]["inner"] == {"name": "sgd"}


def test_int_ranges_include_both_ends() -> None:
    assert {trial["layers"] for trial in _trials(7, 200)} == {1, 2, 3}


def test_the_draws_are_those_recorded_event_logs_replay() -> None:
    # Pinned from the stored-JSON implementation: same RNG calls, same order, same types.
    rng = random.Random(3)
    first, second = sample_hparams(STORED, rng), sample_hparams(STORED, rng)

    assert first == {
        "act": "relu", "dropout": 0.5555845463762994, "global_batch_size": 64, "layers": 1,
        "lr": 0.0012878506444947522, "optimizer": {"inner": {"name": "sgd"}, "momentum": 0.6039200385961945},
    }  # fmt: skip
    assert second == {
        "act": None, "dropout": 0.5485112506100336, "global_batch_size": 64, "layers": 3,
        "lr": 0.00010952265788383621, "optimizer": {"inner": {"name": "sgd"}, "momentum": 0.83746908209646},
    }  # fmt: skip
    assert rng.random() == 0.25935401432800764
    assert type(first["layers"]) is int and type(first["global_batch_size"]) is int
    assert type(first["dropout"]) is float and type(first["optimizer"]["momentum"]) is float


def test_a_sampled_value_is_not_shared_with_the_config() -> None:
    hparams = typed({"fixed": {"a": [1]}, "pick": {"type": "categorical", "vals": [{"b": 2}]}})
    sampled = sample_hparams(hparams, random.Random(0))
    sampled["fixed"]["a"].append(2)
    sampled["pick"]["b"] = 3
    point = grid_point(hparams, 0)
    point["pick"]["b"] = 4

    assert sample_hparams(hparams, random.Random(0)) == {"fixed": {"a": [1]}, "pick": {"b": 2}}
    assert grid_points(hparams) == [{"fixed": {"a": [1]}, "pick": {"b": 2}}]


def test_names_are_visited_in_sorted_order_whatever_the_mapping_order() -> None:
    reordered = dict(reversed(list(STORED.items())))

    assert sample_hparams(reordered, random.Random(5)) == sample_hparams(STORED, random.Random(5))


@settings(database=None)
@given(st.integers(0, 2**32 - 1))
def test_sampling_is_pure_for_any_seed(seed: int) -> None:
    assert sample_hparams(STORED, random.Random(seed)) == sample_hparams(STORED, random.Random(seed))


def test_grid_is_the_cartesian_product_first_axis_slowest() -> None:
    hparams = typed(
        {
            "b": {"type": "categorical", "vals": [10, 20]},
            "a": {"type": "int", "minval": 0, "maxval": 2, "count": 3},
        }
    )

    assert grid_points(hparams) == [
        {"a": 0, "b": 10}, {"a": 0, "b": 20}, {"a": 1, "b": 10},
        {"a": 1, "b": 20}, {"a": 2, "b": 10}, {"a": 2, "b": 20},
    ]  # fmt: skip


def test_grid_nested_groups_give_one_axis_per_leaf() -> None:
    hparams = typed(
        {
            "opt": {
                "type": "object",
                "vals": {
                    "lr": {"type": "categorical", "vals": [1, 2]},
                    "empty": {"type": "object", "vals": {}},
                },
            },
            "c": {"type": "const", "val": "x"},
        }
    )

    assert grid_points(hparams) == [
        {"c": "x", "opt": {"empty": {}, "lr": 1}},
        {"c": "x", "opt": {"empty": {}, "lr": 2}},
    ]


def test_int_axis_is_clamped_and_rounded_half_away_from_zero() -> None:
    assert axis_values(IntHyperparameter(minval=0, maxval=2, count=10)) == [0, 1, 2]
    assert axis_values(IntHyperparameter(minval=0, maxval=5, count=3)) == [0, 3, 5]  # 2.5 rounds up
    assert axis_values(IntHyperparameter(minval=-5, maxval=0, count=3)) == [-5, -3, 0]  # -2.5 rounds down
    assert axis_values(IntHyperparameter(minval=1, maxval=4, count=1)) == [3]
    assert all(type(value) is int for value in axis_values(IntHyperparameter(minval=0, maxval=5, count=3)))


def test_double_and_log_axes_are_evenly_spaced_including_the_ends() -> None:
    assert axis_values(DoubleHyperparameter(minval=0.0, maxval=1.0, count=3)) == [0.0, 0.5, 1.0]
    assert axis_values(DoubleHyperparameter(minval=0.0, maxval=1.0, count=1)) == [0.5]
    logs = axis_values(LogHyperparameter(minval=-3.0, maxval=-1.0, base=10.0, count=3))
    assert [round(math.log10(value), 9) for value in logs] == [-3.0, -2.0, -1.0]


def test_a_range_without_a_count_has_no_grid_axis() -> None:
    with pytest.raises(ValueError, match="count"):
        axis_values(DoubleHyperparameter(minval=0.0, maxval=1.0))
    assert axis_values(CategoricalHyperparameter(vals=[3, "a"])) == [3, "a"]


def test_grid_size_is_the_product_of_axis_sizes() -> None:
    config = load_config((Path(__file__).parent / "seed_configs" / "grid.yaml").read_text())

    assert grid_size(config.hyperparameters) == len(grid_points(config.hyperparameters)) == 3 * 2 * 3 * 2


def test_one_grid_point_is_the_same_as_in_the_whole_grid() -> None:
    hyperparameters = typed(
        {
            "a": {"type": "int", "minval": 0, "maxval": 2, "count": 3},
            "b": {"type": "categorical", "vals": [10, 20]},
            "n": {
                "type": "object",
                "vals": {"c": {"type": "const", "val": "x"}, "d": {"type": "categorical", "vals": [1, 2]}},
            },
        }
    )
    points = grid_points(hyperparameters)
    assert grid_size(hyperparameters) == len(points) == 12
    assert [grid_point(hyperparameters, i) for i in range(12)] == points
