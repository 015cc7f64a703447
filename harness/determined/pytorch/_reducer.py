"""Reducing metrics across batches and across workers.

Two kinds, as in Determined:
- the `evaluate_batch` outputs, one dict per batch on each worker, reduced per metric by the
  trial's `evaluation_reducer()` (`_reduce_batch_metrics`);
- custom reducers the trial registers with `context.wrap_reducer()`: each worker condenses
  what it saw (`per_slot_reduce`), then every worker combines all of those
  (`cross_slot_reduce`) (`_PyTorchReducerContext`).

Both use one allgather, so every worker ends with the same metrics.
"""

import abc
import enum
import itertools
import numbers
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import torch

from determined.core import DistributedContext


class Reducer(enum.Enum):
    """How `evaluation_reducer()` combines one metric's per-batch values: their mean (weighted
    by batch count across workers), sum, maximum or minimum."""

    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


class MetricReducer(abc.ABC):
    """A metric computed over a whole training period or validation pass, across workers.

    Collect values however suits the metric (an `update()` method of your own, called from
    `train_batch` or `evaluate_batch`); then `per_slot_reduce()` condenses what this worker
    collected into a small picklable value, and `cross_slot_reduce()` turns the list of every
    worker's value into the metric. Register it with `context.wrap_reducer(reducer, name=...)`.
    """

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget the values collected; called before each training period and validation."""

    @abc.abstractmethod
    def per_slot_reduce(self) -> Any:
        """This worker's contribution (picklable), once its batches are done."""

    @abc.abstractmethod
    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        """The metric from every worker's `per_slot_reduce()` value, in rank order: one value
        when the reducer was wrapped with a `name`, else a dict of metric names to values."""


class _SimpleReducer(MetricReducer):
    """What `wrap_reducer(fn)` gives for a plain function: `update(value)` collects, and `fn`
    gets every worker's values as one list, in the order of the batches they came from."""

    def __init__(self, fn: Callable[[list[Any]], Any]) -> None:
        self.fn = fn
        self.values: list[Any] = []

    def reset(self) -> None:
        self.values = []

    def update(self, value: Any) -> None:
        self.values.append(value)

    def per_slot_reduce(self) -> list[Any]:
        return self.values

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> Any:
        # Workers see batches round-robin, so interleaving their lists restores the data
        # order (exactly so when update() is called once per batch).
        gap = object()
        interleaved = itertools.zip_longest(*per_slot_metrics, fillvalue=gap)
        return self.fn([value for row in interleaved for value in row if value is not gap])


class _WrappedReducer:
    """A registered reducer; its errors name it, since the stack alone does not say which
    reducer failed."""

    def __init__(self, reducer: MetricReducer, name: str | None, for_training: bool, for_validation: bool):
        self.reducer = reducer
        self.name = name
        self.for_training = for_training
        self.for_validation = for_validation

    def describe(self) -> str:
        if isinstance(self.reducer, _SimpleReducer):
            what = f"reducer function {getattr(self.reducer.fn, '__name__', repr(self.reducer.fn))}()"
        else:
            what = f"MetricReducer {type(self.reducer).__name__}"
        return f"{what} (name={self.name!r})"

    def call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.reducer, method)(*args)
        except Exception as error:
            raise ValueError(f"the {self.describe()} failed in {method}(): {error}") from error

    def metrics(self, per_slot_metrics: list[Any]) -> dict[str, Any]:
        reduced = self.call("cross_slot_reduce", per_slot_metrics)
        if self.name is None:
            if not isinstance(reduced, dict):
                raise TypeError(
                    f"the {self.describe()} was wrapped without a name, so it must return a dict "
                    f"of metric names to values, but it returned a {type(reduced).__name__}; pass "
                    "name=... to wrap_reducer() for a single metric"
                )
            return reduced
        if isinstance(reduced, dict):
            raise TypeError(
                f"the {self.describe()} was wrapped with a name, so it must return one metric "
                "value, but it returned a dict; leave name out of wrap_reducer() to return "
                "several metrics as a dict"
            )
        return {self.name: reduced}


def _single_process_allgather(value: Any) -> list[Any]:
    return [value]


R = TypeVar("R", bound=MetricReducer)


class _PyTorchReducerContext:
    """The reducers a trial registered, and their reduction across workers."""

    def __init__(self, allgather: Callable[[Any], list[Any]] = _single_process_allgather) -> None:
        self._wrapped_reducers: list[_WrappedReducer] = []
        self._allgather = allgather

    @overload
    def wrap_reducer(
        self, reducer: R, name: str | None = None, for_training: bool = True, for_validation: bool = True
    ) -> R: ...

    @overload
    def wrap_reducer(
        self,
        reducer: Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> _SimpleReducer: ...

    def wrap_reducer(
        self,
        reducer: MetricReducer | Callable[[list[Any]], Any],
        name: str | None = None,
        for_training: bool = True,
        for_validation: bool = True,
    ) -> MetricReducer:
        """Register a metric that must be computed over all workers' data (an ROC AUC, say),
        not averaged from each worker's.

        `reducer` is a MetricReducer, returned as it is, or a function of the list of every
        value passed to `.update()`, for which a reducer with that `update(value)` method is
        returned. With `name`, the reducer gives one metric of that name; without, a dict of
        metrics. Its metrics join the training metrics, the validation metrics, or both.
        """
        if any(wrapped.reducer is reducer for wrapped in self._wrapped_reducers):
            raise ValueError(f"this {type(reducer).__name__} is already wrapped; wrap each reducer once")
        if not isinstance(reducer, MetricReducer):
            if not callable(reducer):
                raise TypeError(
                    "wrap_reducer() takes a det.pytorch.MetricReducer or a function of a list of "
                    f"values, not a {type(reducer).__name__}"
                )
            reducer = _SimpleReducer(reducer)
        self._wrapped_reducers.append(_WrappedReducer(reducer, name, for_training, for_validation))
        return reducer

    def reset_reducers(self) -> None:
        for wrapped in self._wrapped_reducers:
            wrapped.call("reset")

    def reduce_metrics(self, for_training: bool) -> dict[str, Any]:
        """The metrics of the reducers registered for training (or validation). Every worker
        must call it, in step: it allgathers once (when any such reducer exists)."""
        wrapped_reducers = [
            wrapped
            for wrapped in self._wrapped_reducers
            if (wrapped.for_training if for_training else wrapped.for_validation)
        ]
        if not wrapped_reducers:
            return {}
        per_slot = [wrapped.call("per_slot_reduce") for wrapped in wrapped_reducers]
        gathered = self._allgather(per_slot)
        metrics: dict[str, Any] = {}
        for i, wrapped in enumerate(wrapped_reducers):
            metrics.update(wrapped.metrics([worker[i] for worker in gathered]))
        return metrics


# One worker's part of one metric: (sum, batch count, max, min) of its per-batch values.
_Partial = tuple[float, int, float, float]


def _reduce_batch_metrics(
    reducer: Reducer | dict[str, Reducer],
    batch_metrics: list[dict[str, Any]],
    distributed: DistributedContext,
) -> dict[str, float]:
    """Combine every worker's `evaluate_batch` outputs (one dict per batch) into one value per
    metric, on every worker, per the trial's `evaluation_reducer()`.

    AVG is the mean over all batches of all workers (so workers that saw more batches weigh
    more). Each worker sends only four numbers per metric. Every worker must call it, even one
    with no batches.
    """
    partials = {name: _partial(name, values) for name, values in _by_metric(batch_metrics).items()}
    everyone = distributed.allgather(partials)
    names = list(dict.fromkeys(name for worker in everyone for name in worker))
    return {
        name: _combine(name, _reducer_for(reducer, name), [w[name] for w in everyone if name in w])
        for name in names
    }


def _by_metric(batch_metrics: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names = list(batch_metrics[0]) if batch_metrics else []
    by_metric: dict[str, list[Any]] = {name: [] for name in names}
    for i, metrics in enumerate(batch_metrics):
        if not isinstance(metrics, dict):
            raise TypeError(
                f"evaluate_batch() must return a dict of metric names to values, got a "
                f"{type(metrics).__name__}"
            )
        if set(metrics) != set(names):
            raise ValueError(
                f"evaluate_batch() must return the same metrics for every batch: batch {i} gave "
                f"{sorted(metrics)}, the first batch {sorted(names)}"
            )
        for name in names:
            by_metric[name].append(metrics[name])
    return by_metric


def _partial(name: str, values: Sequence[Any]) -> _Partial:
    numbers_ = _as_floats(name, values)
    return (sum(numbers_), len(numbers_), max(numbers_), min(numbers_))


def _as_floats(name: str, values: Sequence[Any]) -> list[float]:
    """Plain floats of one metric's per-batch values, fetched from the device in one go."""
    if all(isinstance(value, torch.Tensor) for value in values):
        if any(value.numel() != 1 for value in values):
            raise _not_scalar(name)
        stacked = torch.stack([value.detach().reshape(()) for value in values])
        floats: list[float] = stacked.to("cpu", torch.float64).tolist()
        return floats
    result = []
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise _not_scalar(name)
            result.append(float(value.item()))
        elif isinstance(value, numbers.Real) or (hasattr(value, "__float__") and not isinstance(value, str)):
            result.append(float(value))  # also numpy scalars and one-element arrays
        else:
            raise _not_scalar(name)
    return result


def _not_scalar(name: str) -> TypeError:
    return TypeError(
        f"evaluate_batch() metric {name!r} must be a number or a one-element tensor; for a metric "
        "over whole arrays, register a custom reducer with context.wrap_reducer()"
    )


def _reducer_for(reducer: Reducer | dict[str, Reducer], name: str) -> Reducer:
    if isinstance(reducer, Reducer):
        return reducer
    if not isinstance(reducer, dict):
        raise TypeError(
            f"evaluation_reducer() must return a det.pytorch.Reducer or a dict of metric names to "
            f"Reducers, got {reducer!r}"
        )
    if name not in reducer:
        raise ValueError(
            f"evaluation_reducer() gives no Reducer for the metric {name!r} that evaluate_batch() "
            f"returns; it has {sorted(reducer)}"
        )
    return reducer[name]


def _combine(name: str, reducer: Reducer, partials: list[_Partial]) -> float:
    if reducer is Reducer.AVG:
        return sum(p[0] for p in partials) / sum(p[1] for p in partials)
    if reducer is Reducer.SUM:
        return sum(p[0] for p in partials)
    if reducer is Reducer.MAX:
        return max(p[2] for p in partials)
    if reducer is Reducer.MIN:
        return min(p[3] for p in partials)
    raise TypeError(f"evaluation_reducer() for {name!r} must be a det.pytorch.Reducer, got {reducer!r}")
