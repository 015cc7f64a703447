"""The experiment configuration's limits (expconf/_limits.py): each refused before the
work it bounds, with a sentence naming the limit and what was found; the CLI checks them
before it connects."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from determined.cli import experiment as cli_experiment
from determined.cli._client import CliError
from determined.common import expconf
from determined.common.expconf import InvalidConfigError, load_config, parse_yaml

BASE = "entrypoint: python3 train.py\nsearcher: {name: grid, metric: loss}\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs: each anchor a list of `width` aliases of the one before."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ",".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def merge_bomb(levels: int = 30) -> str:
    """Merge keys doubling a mapping at every level (PyYAML flattens merges by copying)."""
    lines = ["m0: &m0 {k: 1}"]
    lines += [f"m{level}: &m{level} {{<<: [*m{level - 1}, *m{level - 1}]}}" for level in range(1, levels)]
    return "\n".join(lines) + "\n"


def refusal(source: str | dict[str, Any]) -> str:
    with pytest.raises(InvalidConfigError) as raised:
        load_config(source)
    return str(raised.value)


def test_the_alias_bomb_is_refused_before_it_is_expanded() -> None:
    bomb = alias_bomb()
    assert len(bomb) < 1000
    message = refusal(bomb)
    assert f"more than {expconf.MAX_CONFIG_VALUES} values" in message
    assert "alias" in message


def test_a_merge_key_bomb_is_refused() -> None:
    message = refusal(merge_bomb())
    assert f"at most {expconf.MAX_CONFIG_DEPTH}" in message or f"{expconf.MAX_CONFIG_VALUES}" in message


def test_a_merge_key_bomb_within_the_depth_is_refused_by_its_values() -> None:
    assert f"more than {expconf.MAX_CONFIG_VALUES} values" in refusal(merge_bomb(levels=25))


def test_an_alias_inside_what_it_names_is_refused() -> None:
    assert f"more than {expconf.MAX_CONFIG_DEPTH} levels deep" in refusal("x: &x [*x]\n")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000 + "]" * 5000,
        "a: " + "{b: " * 200 + "1" + "}" * 200,
        "".join(f"{'  ' * depth}k:\n" for depth in range(300)),
    ],
)
def test_deep_nesting_is_a_sentence_not_a_recursion_error(text: str) -> None:
    message = refusal(text)
    assert f"more than {expconf.MAX_CONFIG_DEPTH} levels deep" in message and "at line" in message


def test_nesting_up_to_the_limit_is_fine() -> None:
    def nested(lists: int) -> str:  # a mapping holding `lists` lists in one another
        return "a: " + "[" * lists + "1" + "]" * lists

    assert parse_yaml(nested(expconf.MAX_CONFIG_DEPTH - 1))["a"]
    with pytest.raises(InvalidConfigError, match="levels deep"):
        parse_yaml(nested(expconf.MAX_CONFIG_DEPTH))
    as_mapping: dict[str, Any] = {"a": 1}
    for _ in range(expconf.MAX_CONFIG_DEPTH - 1):
        as_mapping = {"a": as_mapping}
    with pytest.raises(InvalidConfigError, match='unknown field "a"'):
        load_config(as_mapping)  # within the depth, though not a config
    with pytest.raises(InvalidConfigError, match="levels deep"):
        load_config({"a": as_mapping})


def test_a_config_over_the_size_limit_is_refused_before_parsing() -> None:
    text = "data: {junk: '" + "x" * 50 * 1024 * 1024 + "'}\n"
    message = refusal(text)
    assert "50.0 MiB" in message and f"at most 1.0 MiB ({expconf.MAX_CONFIG_BYTES} bytes)" in message


def test_the_size_counts_utf8_bytes() -> None:
    text = "name: '" + "é" * (expconf.MAX_CONFIG_BYTES // 2) + "'\n"  # under the limit in characters only
    assert "at most 1.0 MiB" in refusal(text)


def test_a_config_near_the_limits_is_accepted() -> None:
    data = "".join(f"  key{index}: value {index}\n" for index in range(30_000))
    config = load_config(BASE.replace("grid", "single") + "data:\n" + data)
    assert len(config.data) == 30_000


def test_a_mapping_is_held_to_the_same_limits() -> None:
    looped: dict[str, Any] = {"a": []}
    looped["a"].append(looped)
    assert "levels deep" in refusal(looped)
    shared = ["x"] * 1000
    wide = {"data": {"k": [shared] * 1000}}  # a million values, built from two lists
    assert f"more than {expconf.MAX_CONFIG_VALUES} values" in refusal(wide)


def test_categorical_values_are_limited() -> None:
    many = ",".join(map(str, range(expconf.MAX_HYPERPARAMETER_VALUES + 1)))
    message = refusal(BASE + f"hyperparameters:\n  x: {{type: categorical, vals: [{many}]}}\n")
    assert message == (
        f"hyperparameters.x.vals: has {expconf.MAX_HYPERPARAMETER_VALUES + 1} values;"
        f" one hyperparameter may have at most {expconf.MAX_HYPERPARAMETER_VALUES}"
    )


def test_a_million_categorical_values_are_refused() -> None:
    text = BASE + "hyperparameters:\n  x: {type: categorical, vals: [" + ",".join(["1"] * 1_000_000) + "]}\n"
    assert "at most 1.0 MiB" in refusal(text)
    as_mapping = {
        "entrypoint": "x",
        "searcher": {"name": "grid", "metric": "loss"},
        "hyperparameters": {"x": {"type": "categorical", "vals": list(range(1_000_000))}},
    }
    assert f"more than {expconf.MAX_CONFIG_VALUES} values" in refusal(as_mapping)


def test_a_range_count_is_limited() -> None:
    message = refusal(BASE + "hyperparameters:\n  x: {type: double, minval: 0, maxval: 1, count: 1000000}\n")
    assert message == (
        "hyperparameters.x.count: asks for 1000000 values;"
        f" one hyperparameter may have at most {expconf.MAX_HYPERPARAMETER_VALUES}"
    )


def test_the_grid_size_is_limited() -> None:
    axes = "".join(
        f"  x{index}: {{type: categorical, vals: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}\n" for index in range(6)
    )
    assert refusal(BASE + "hyperparameters:\n" + axes) == (
        f"hyperparameters: the grid search has 1000000 points (trials); at most {expconf.MAX_GRID_POINTS} are allowed"
    )
    huge = "".join(f"  x{index}: {{type: int, minval: 0, maxval: 1000, count: 1000}}\n" for index in range(9))
    assert "more than 1000000000000000 points" in refusal(BASE + "hyperparameters:\n" + huge)


def test_an_int_range_counts_its_integers_only() -> None:
    config = load_config(BASE + "hyperparameters:\n  x: {type: int, minval: 0, maxval: 3, count: 5000}\n")
    assert config.hyperparameters["x"].count == 5000  # type: ignore[union-attr]


# -- the CLI: before anything is sent ------------------------------------------------------


def _create_args(config_file: Path) -> argparse.Namespace:
    return argparse.Namespace(config_file=config_file, config=[], local=False, test_mode=False)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 5000 + "]" * 5000, "levels deep"),
        (alias_bomb(), "values (mappings, lists and scalars"),
        (
            BASE + "hyperparameters:\n  x: {type: categorical, vals: [" + ",".join(["1"] * 20_000) + "]}\n",
            "one hyperparameter may have at most",
        ),
    ],
)
def test_the_cli_refuses_with_a_sentence(tmp_path: Path, text: str, expected: str) -> None:
    config_file = tmp_path / "config.yaml"
    config_file.write_text(text)
    with pytest.raises(CliError) as raised:
        cli_experiment.create_experiment(_create_args(config_file))
    assert str(raised.value).startswith(f"{config_file} is not a valid experiment config:\n")
    assert expected in str(raised.value)


def test_the_cli_refuses_a_large_file_without_reading_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file = tmp_path / "config.yaml"
    with config_file.open("wb") as sparse:
        sparse.truncate(50 * 1024 * 1024)

    def unread(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_text", unread)
    with pytest.raises(CliError) as raised:
        cli_experiment.create_experiment(_create_args(config_file))
    assert f"50.0 MiB ({50 * 1024 * 1024} bytes); at most 1.0 MiB ({expconf.MAX_CONFIG_BYTES} bytes)" in str(
        raised.value
    )


def test_test_mode_reads_configs_within_the_limits() -> None:
    from determined.cli import _test_mode

    with pytest.raises(CliError, match="levels deep"):
        _test_mode._rewritten_yaml("[" * 5000 + "]" * 5000)


def test_a_stored_config_is_not_held_to_the_limits_again() -> None:
    """Its defaults may push a config created just under a limit over it: the trial and the
    services must still read it."""
    stored = {
        "entrypoint": "x",
        "searcher": {"name": "single", "metric": "loss"},
        "data": {"k": ["v"] * expconf.MAX_CONFIG_VALUES},
    }
    assert f"more than {expconf.MAX_CONFIG_VALUES} values" in refusal(stored)
    assert len(load_config(stored, new_experiment=False).data["k"]) == expconf.MAX_CONFIG_VALUES
