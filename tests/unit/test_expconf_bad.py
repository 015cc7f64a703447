"""Every invalid configuration in configs/bad_configs.yaml gives exactly its errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from determined.common.expconf import InvalidConfigError, apply_overrides, load_config

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parent / "configs" / "bad_configs.yaml").read_text()
)
BASE = {"entrypoint": "python3 train.py", "searcher": {"name": "single", "metric": "loss"}}


def _source(case: dict[str, Any]) -> Any:
    if "text" in case:
        return case["text"]
    if case.get("standalone"):
        return case["config"]
    return _deep_merge(copy.deepcopy(BASE), case["config"])


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def test_the_corpus_is_large_and_names_are_unique() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) >= 60
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_bad_config_gives_its_errors(case: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        load_config(_source(case))

    assert raised.value.errors == case["errors"]
    assert str(raised.value) == "\n".join(case["errors"])


def test_the_base_config_is_valid() -> None:
    assert load_config(BASE).searcher.name == "single"


def test_overrides_that_break_a_config_are_reported_like_the_file() -> None:
    broken = apply_overrides(BASE, ["searcher.name=random", "searcher.max_trials=0"])

    with pytest.raises(InvalidConfigError) as raised:
        load_config(broken)

    assert raised.value.errors == ["searcher.max_trials: must be at least 1"]
