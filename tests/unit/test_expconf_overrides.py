"""``--config key.sub=value`` overrides (compat doc section 1.8)."""

from __future__ import annotations

from typing import Any

import pytest

from determined.common.expconf import InvalidConfigError, apply_overrides, load_config

FILE: dict[str, Any] = {
    "name": "from-file",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "random", "metric": "loss", "max_trials": 16},
    "resources": {"slots_per_trial": 1},
}


def test_dotted_keys_are_merged_into_nested_maps() -> None:
    merged = apply_overrides(FILE, ["searcher.max_trials=4", "name=x"])

    assert merged["searcher"] == {"name": "random", "metric": "loss", "max_trials": 4}
    assert merged["name"] == "x"
    assert FILE["searcher"]["max_trials"] == 16  # the input is untouched


def test_values_are_read_as_yaml() -> None:
    merged = apply_overrides(
        FILE, ["max_restarts=0", "debug=true", "description=null", "data.lr=1e-3", "data.s='7'"]
    )

    assert merged["max_restarts"] == 0
    assert merged["debug"] is True
    assert merged["description"] is None
    assert merged["data"] == {"lr": 0.001, "s": "7"}


def test_a_comma_makes_a_list() -> None:
    assert apply_overrides(FILE, ["labels=a,b,3"])["labels"] == ["a", "b", 3]


def test_flow_yaml_is_not_split_on_commas() -> None:
    merged = apply_overrides(FILE, ["labels=[a, b]", "data={x: 1, y: 2}"])

    assert merged["labels"] == ["a", "b"]
    assert merged["data"] == {"x": 1, "y": 2}


def test_a_single_bind_mount_becomes_a_list() -> None:
    merged = apply_overrides(FILE, ["bind_mounts={host_path: /data, container_path: /data}"])

    assert merged["bind_mounts"] == [{"host_path": "/data", "container_path": "/data"}]
    assert load_config(merged).bind_mounts[0].host_path == "/data"


def test_new_sections_are_created_and_maps_are_merged_deeply() -> None:
    merged = apply_overrides(FILE, ["resources.priority=10", "environment.environment_variables=A=1,B=2"])

    assert merged["resources"] == {"slots_per_trial": 1, "priority": 10}
    assert merged["environment"] == {"environment_variables": ["A=1", "B=2"]}


def test_a_later_override_wins() -> None:
    assert apply_overrides(FILE, ["max_restarts=1", "max_restarts=2"])["max_restarts"] == 2


def test_an_override_can_replace_a_map_with_a_scalar() -> None:
    assert apply_overrides(FILE, ["searcher=none"])["searcher"] == "none"


@pytest.mark.parametrize(
    ("override", "error"),
    [
        ("max_restarts", 'invalid config override "max_restarts": expected KEY.SUB=VALUE'),
        ("=3", 'invalid config override "=3": expected KEY.SUB=VALUE'),
        ("searcher..name=x", 'invalid config override "searcher..name=x": expected KEY.SUB=VALUE'),
        (
            "data=[1, 2",
            (
                'invalid config override "data=[1, 2": invalid YAML at line 1, column 6: '
                "expected ',' or ']', but got '<stream end>'"
            ),
        ),
    ],
)
def test_bad_override_syntax_is_a_clear_error(override: str, error: str) -> None:
    with pytest.raises(InvalidConfigError) as raised:
        apply_overrides(FILE, [override])

    assert raised.value.errors == [error]


def test_every_bad_override_is_reported() -> None:
    with pytest.raises(InvalidConfigError) as raised:
        apply_overrides(FILE, ["a", "name=ok", "b"])

    assert len(raised.value.errors) == 2
