"""The search method an experiment's (typed) config asks for. Every default
comes from the config model: nothing here re-defaults a field."""

from typing import TypeVar

from determined.common.expconf import ExperimentConfig, SearcherConfig
from services.searcher.methods.adaptive import AdaptiveASHA
from services.searcher.methods.asha import AsyncHalving
from services.searcher.methods.base import SearchMethod
from services.searcher.methods.grid import GridSearch
from services.searcher.methods.random import RandomSearch

T = TypeVar("T")


class UnsupportedSearcherError(ValueError):
    """The config names a searcher Determined 0.38 removed (custom, adaptive,
    adaptive_simple, sync_halving): old experiments load, but cannot search."""


def search_method(config: ExperimentConfig) -> SearchMethod:
    searcher = config.searcher
    match searcher.name:
        case "single":
            return RandomSearch(max_trials=1, max_concurrent_trials=1, single=True)
        case "random":
            return RandomSearch(
                max_trials=_required(searcher.max_trials),
                max_concurrent_trials=searcher.max_concurrent_trials,
            )
        case "grid":
            return GridSearch(
                hyperparameters=config.hyperparameters,
                max_concurrent_trials=searcher.max_concurrent_trials,
            )
        case "async_halving":
            return _async_halving(searcher)
        case "adaptive_asha":
            return _adaptive_asha(searcher)
    raise UnsupportedSearcherError(
        f"the `{searcher.name}` searcher was removed in Determined 0.38 and cannot run; "
        "use single, random, grid, async_halving or adaptive_asha"
    )


def _async_halving(searcher: SearcherConfig) -> AsyncHalving:
    time_metric, max_time = _required(searcher.asha_time())
    return AsyncHalving.new(
        metric=_required(searcher.metric),
        smaller_is_better=searcher.smaller_is_better,
        time_metric=time_metric,
        max_time=max_time,
        num_rungs=_required(searcher.num_rungs),
        divisor=searcher.divisor,
        max_trials=_required(searcher.max_trials),
        max_concurrent_trials=searcher.max_concurrent_trials,
        time_from_steps=_time_from_steps(searcher),
    )


def _adaptive_asha(searcher: SearcherConfig) -> AdaptiveASHA:
    time_metric, max_time = _required(searcher.asha_time())
    return AdaptiveASHA.new(
        metric=_required(searcher.metric),
        smaller_is_better=searcher.smaller_is_better,
        time_metric=time_metric,
        max_time=max_time,
        max_trials=_required(searcher.max_trials),
        divisor=searcher.divisor,
        max_concurrent_trials=searcher.max_concurrent_trials,
        mode=searcher.mode,
        max_rungs=searcher.max_rungs,
        bracket_rungs=searcher.bracket_rungs,
        time_from_steps=_time_from_steps(searcher),
    )


def _time_from_steps(searcher: SearcherConfig) -> bool:
    """A seed-era `max_length` in batches: the harness reports how many
    batches a validation comes after as its steps_completed."""
    return searcher.time_metric is None and _required(searcher.asha_time())[0] == "batches"


def _required(value: T | None) -> T:
    assert value is not None, "the config model requires this field for this searcher"
    return value
