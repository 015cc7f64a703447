"""Property: the stored form of any valid config loads back to an equal config."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from determined.common.expconf import apply_cluster_defaults, load_config

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)
scalars = st.one_of(
    st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False), st.booleans(), names, st.none()
)
# A map with a "type" key is a typed hyperparameter, so a group cannot hold one named "type".
hp_names = names.filter(lambda name: name != "type")
counts = st.one_of(st.none(), st.integers(1, 10))


@st.composite
def int_ranges(draw: st.DrawFn) -> dict[str, Any]:
    low = draw(st.integers(-100, 100))
    return {"type": "int", "minval": low, "maxval": low + draw(st.integers(1, 100)), "count": draw(counts)}


@st.composite
def float_ranges(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    low = draw(st.floats(-10, 10, allow_nan=False))
    spec = {"type": kind, "minval": low, "maxval": low + draw(st.floats(0.01, 10)), "count": draw(counts)}
    return spec | ({"base": draw(st.sampled_from([2, 10, 2.718]))} if kind == "log" else {})


leaves = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.builds(lambda value: {"type": "const", "val": value}, scalars),
    int_ranges(),
    float_ranges("double"),
    float_ranges("log"),
    st.builds(lambda vals: {"type": "categorical", "vals": vals}, st.lists(scalars, min_size=1, max_size=4)),
)
hyperparameters = st.recursive(
    st.dictionaries(hp_names, leaves, max_size=4),
    lambda children: st.dictionaries(hp_names, st.one_of(leaves, children), max_size=3),
    max_leaves=10,
)
lengths = st.one_of(
    st.none(),
    st.integers(0, 10**6),
    st.builds(
        lambda unit, n: {unit: n}, st.sampled_from(["batches", "records", "epochs"]), st.integers(0, 10**6)
    ),
)


@st.composite
def searchers(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["single", "random", "grid", "async_halving", "adaptive_asha"]))
    searcher: dict[str, Any] = {"name": name, "metric": draw(names), "smaller_is_better": draw(st.booleans())}
    if name in ("random", "async_halving", "adaptive_asha"):
        searcher["max_trials"] = draw(st.integers(1, 100))
    if name != "single":
        searcher["max_concurrent_trials"] = draw(st.integers(0, 32))
    if name == "async_halving":
        searcher["num_rungs"] = draw(st.integers(1, 6))
    if name == "adaptive_asha":
        searcher["mode"] = draw(st.sampled_from(["aggressive", "standard", "conservative"]))
        searcher["bracket_rungs"] = draw(st.lists(st.integers(1, 5), max_size=3))
    if name in ("async_halving", "adaptive_asha"):
        searcher["divisor"] = draw(st.sampled_from([2, 3, 4.5]))
        if draw(st.booleans()):
            searcher |= {"time_metric": draw(names), "max_time": draw(st.integers(1, 10**5))}
        else:
            searcher["max_length"] = draw(lengths.filter(lambda length: length is not None))
    else:
        searcher["max_length"] = draw(lengths)
    return searcher


storages = st.one_of(
    st.none(),
    st.builds(
        lambda keep: {"type": "shared_fs", "host_path": "/ckpt", "save_trial_best": keep}, st.integers(0, 5)
    ),
    st.builds(lambda bucket: {"type": "s3", "bucket": bucket, "prefix": "p"}, names),
    st.just({"type": "gcs", "bucket": "b"}),
    st.just({"type": "directory", "container_path": "/ckpt"}),
    st.just({"type": "azure", "container": "c", "connection_string": "x"}),
)


def _with_grid_counts(hparams: dict[str, Any]) -> dict[str, Any]:
    """Grid search needs a count on every range; give one where it is missing."""
    fixed: dict[str, Any] = {}
    for name, spec in hparams.items():
        if isinstance(spec, dict) and spec.get("type") in ("int", "double", "log"):
            fixed[name] = spec | {"count": spec["count"] or 2}
        elif isinstance(spec, dict) and "type" not in spec:
            fixed[name] = _with_grid_counts(spec)
        else:
            fixed[name] = spec
    return fixed


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    searcher = draw(searchers())
    hparams = draw(hyperparameters)
    config: dict[str, Any] = {
        "entrypoint": draw(st.one_of(st.just("python3 train.py"), st.lists(names, min_size=1, max_size=3))),
        "searcher": searcher,
        "hyperparameters": _with_grid_counts(hparams) if searcher["name"] == "grid" else hparams,
        "resources": {
            "slots_per_trial": draw(st.integers(0, 8)),
            "priority": draw(st.one_of(st.none(), st.integers(1, 99))),
        },
        "max_restarts": draw(st.integers(0, 10)),
        "labels": draw(st.lists(names, max_size=3)),
        "bind_mounts": draw(
            st.lists(st.builds(lambda p: {"host_path": f"/{p}", "container_path": p}, names), max_size=2)
        ),
        "data": draw(st.dictionaries(names, scalars, max_size=3)),
        "environment": {
            "environment_variables": draw(st.lists(st.builds(lambda k: f"{k}=1", names), max_size=2))
        },
    }
    storage = draw(storages)
    return config | ({"checkpoint_storage": storage} if storage else {})


@settings(max_examples=150, deadline=None, database=None)
@given(configs())
def test_stored_form_loads_back_to_an_equal_config(raw: dict[str, Any]) -> None:
    config = load_config(raw)

    stored = config.to_json_dict()

    assert load_config(stored) == config
    assert load_config(stored).to_json_dict() == stored


@settings(max_examples=50, deadline=None, database=None)
@given(configs(), st.integers(0, 2**32 - 1))
def test_defaulted_config_also_round_trips(raw: dict[str, Any], seed: int) -> None:
    config = apply_cluster_defaults(
        load_config(raw), checkpoint_host_path="/srv", experiment_seed=seed, name="n"
    )

    assert load_config(config.to_json_dict()) == config
