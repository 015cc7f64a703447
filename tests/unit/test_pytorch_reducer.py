"""Metric reduction across batches and workers: `evaluation_reducer()` over `evaluate_batch`
outputs, and custom reducers from `wrap_reducer()`; several ranks run on threads with the
core's own collectives."""

from typing import Any

import pytest
import torch
from support.distributed_ranks import context, free_port_pair, run_ranks

from determined.core import DistributedContext, DummyDistributedContext
from determined.pytorch import MetricReducer, Reducer
from determined.pytorch._reducer import _PyTorchReducerContext, _reduce_batch_metrics

torch.set_num_threads(1)


def on_ranks(size: int, work: Any) -> list[Any]:
    """work(rank, distributed) on `size` ranks; the results in rank order."""
    ports = free_port_pair()

    def run(rank: int) -> Any:
        distributed = context(rank, size, 1, ports)
        try:
            return work(rank, distributed)
        finally:
            distributed.close()

    results = run_ranks(size, run)
    for result in results.values():
        if isinstance(result, Exception):
            raise result
    return [results[rank] for rank in range(size)]


# -- evaluation_reducer() over evaluate_batch outputs ------------------------------------------


def test_one_worker_reduces_its_batches_by_each_reducer() -> None:
    batches = [{"loss": torch.tensor(1.0), "n": 2}, {"loss": torch.tensor(3.0), "n": 5}]
    single = DummyDistributedContext()
    assert _reduce_batch_metrics(Reducer.AVG, batches, single) == {"loss": 2.0, "n": 3.5}
    assert _reduce_batch_metrics(Reducer.SUM, batches, single) == {"loss": 4.0, "n": 7.0}
    assert _reduce_batch_metrics(Reducer.MAX, batches, single) == {"loss": 3.0, "n": 5.0}
    assert _reduce_batch_metrics(Reducer.MIN, batches, single) == {"loss": 1.0, "n": 2.0}
    per_metric = {"loss": Reducer.MIN, "n": Reducer.SUM}
    assert _reduce_batch_metrics(per_metric, batches, single) == {"loss": 1.0, "n": 7.0}


def test_workers_agree_and_the_average_weighs_every_batch_alike() -> None:
    # Rank 0 saw three batches, rank 1 one, rank 2 none (a short last shard).
    shards = [[{"acc": 0.5}, {"acc": 0.5}, {"acc": 0.5}], [{"acc": 1.0}], []]

    def work(rank: int, distributed: DistributedContext) -> dict[str, float]:
        return _reduce_batch_metrics({"acc": Reducer.AVG} if rank else Reducer.AVG, shards[rank], distributed)

    assert on_ranks(3, work) == [{"acc": 0.625}] * 3


def test_sum_max_and_min_span_the_workers() -> None:
    shards = [[{"a": 1, "b": 1, "c": 1}], [{"a": 2, "b": 7, "c": -3}, {"a": 3, "b": 0, "c": 0}]]
    reducers = {"a": Reducer.SUM, "b": Reducer.MAX, "c": Reducer.MIN}

    def work(rank: int, distributed: DistributedContext) -> dict[str, float]:
        return _reduce_batch_metrics(reducers, shards[rank], distributed)

    assert on_ranks(2, work) == [{"a": 6.0, "b": 7.0, "c": -3.0}] * 2


def test_no_batches_anywhere_gives_no_metrics() -> None:
    assert _reduce_batch_metrics(Reducer.AVG, [], DummyDistributedContext()) == {}


@pytest.mark.parametrize(
    ("batches", "reducer", "error", "match"),
    [
        ([{"loss": 1.0}, {"acc": 1.0}], Reducer.AVG, ValueError, "same metrics for every batch"),
        ([{"loss": 1.0}], {"acc": Reducer.AVG}, ValueError, "no Reducer for the metric 'loss'"),
        ([{"loss": torch.ones(3)}], Reducer.AVG, TypeError, "'loss' must be a number.*wrap_reducer"),
        ([{"loss": "high"}], Reducer.AVG, TypeError, "'loss' must be a number"),
        ([{"loss": 1.0}], "AVG", TypeError, "Reducer or a dict"),
        ([[1.0]], Reducer.AVG, TypeError, "must return a dict"),
    ],
)
def test_bad_outputs_are_named(batches: list[Any], reducer: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        _reduce_batch_metrics(reducer, batches, DummyDistributedContext())


def test_numpy_and_tensor_values_mix() -> None:
    import numpy as np

    batches = [{"x": np.float32(1.0)}, {"x": torch.tensor([3.0])}, {"x": np.array(5.0)}]
    assert _reduce_batch_metrics(Reducer.AVG, batches, DummyDistributedContext()) == {"x": 3.0}


# -- wrap_reducer() ----------------------------------------------------------------------------


class Mean(MetricReducer):
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total, self.count = 0.0, 0

    def update(self, value: float) -> None:
        self.total += value
        self.count += 1

    def per_slot_reduce(self) -> tuple[float, int]:
        return self.total, self.count

    def cross_slot_reduce(self, per_slot_metrics: list[Any]) -> float:
        totals, counts = zip(*per_slot_metrics, strict=True)
        return sum(totals) / sum(counts)


def test_custom_reducers_see_every_worker_and_every_worker_gets_the_metric() -> None:
    def work(rank: int, distributed: DistributedContext) -> tuple[dict[str, Any], dict[str, Any]]:
        reducers = _PyTorchReducerContext(distributed.allgather)
        mean = reducers.wrap_reducer(Mean(), name="mean")
        order = reducers.wrap_reducer(lambda values: {"order": values}, for_training=False)
        for batch in range(rank, 5, 2):  # batches dealt round-robin over 2 workers
            mean.update(float(batch))
            order.update(batch)
        training = reducers.reduce_metrics(for_training=True)
        validation = reducers.reduce_metrics(for_training=False)
        return training, validation

    expected = ({"mean": 2.0}, {"mean": 2.0, "order": [0, 1, 2, 3, 4]})
    assert on_ranks(2, work) == [expected, expected]


def test_reset_forgets_and_nothing_registered_means_no_collective() -> None:
    gathers: list[Any] = []

    def allgather(value: Any) -> list[Any]:
        gathers.append(value)
        return [value]

    reducers = _PyTorchReducerContext(allgather)
    assert reducers.reduce_metrics(for_training=True) == {}
    assert gathers == []
    simple = reducers.wrap_reducer(sum, name="total", for_validation=False)
    simple.update(3)
    reducers.reset_reducers()
    simple.update(4)
    assert reducers.reduce_metrics(for_training=True) == {"total": 4}
    assert reducers.reduce_metrics(for_training=False) == {}
    assert len(gathers) == 1


def test_reducer_mistakes_name_the_reducer() -> None:
    reducers = _PyTorchReducerContext()
    mean = reducers.wrap_reducer(Mean(), name="mean")
    with pytest.raises(ValueError, match="already wrapped"):
        reducers.wrap_reducer(mean)
    with pytest.raises(TypeError, match="MetricReducer or a function"):
        reducers.wrap_reducer(42)  # type: ignore[call-overload]

    unnamed = _PyTorchReducerContext()
    unnamed.wrap_reducer(Mean()).update(1.0)
    with pytest.raises(TypeError, match="MetricReducer Mean .name=None. was wrapped without a name"):
        unnamed.reduce_metrics(for_training=True)

    named_dict = _PyTorchReducerContext()
    named_dict.wrap_reducer(lambda values: {"a": 1}, name="a")
    with pytest.raises(TypeError, match="with a name, so it must return one metric"):
        named_dict.reduce_metrics(for_training=True)

    def broken(values: list[Any]) -> float:
        raise ZeroDivisionError("no values")

    failing = _PyTorchReducerContext()
    failing.wrap_reducer(broken, name="ratio")
    with pytest.raises(
        ValueError, match=r"reducer function broken\(\) \(name='ratio'\) failed in cross_slot_reduce"
    ):
        failing.reduce_metrics(for_training=True)
