"""`det.pytorch.DataLoader`, the samplers, `adapt_batch_sampler`, `to_device`, `data_length`."""

import collections
import logging
from typing import Any

import numpy as np
import pytest
import torch

from determined.pytorch import samplers
from determined.pytorch._data import DataLoader, adapt_batch_sampler, data_length, to_device

torch.set_num_threads(1)


def dataset(n: int) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(n))


def ids(batches: Any) -> list[list[int]]:
    return [batch[0].tolist() for batch in batches]


# --- DataLoader -------------------------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
def test_unshuffled_loader_gives_what_torch_gives(drop_last: bool) -> None:
    ours = DataLoader(dataset(10), batch_size=3, drop_last=drop_last)
    theirs = torch.utils.data.DataLoader(dataset(10), batch_size=3, drop_last=drop_last)
    assert ids(ours) == ids(theirs)
    assert len(ours) == len(theirs) == (3 if drop_last else 4)


def test_shuffled_loader_reshuffles_each_pass_from_its_seed() -> None:
    torch.manual_seed(7)
    first = DataLoader(dataset(20), batch_size=4, shuffle=True)
    torch.manual_seed(7)
    second = DataLoader(dataset(20), batch_size=4, shuffle=True)
    passes = [ids(first) for _ in range(3)]
    assert passes == [ids(second) for _ in range(3)]
    assert passes[0] != passes[1] != passes[2]
    for one_pass in passes:
        assert sorted(i for batch in one_pass for i in batch) == list(range(20))
    torch.manual_seed(8)
    assert ids(DataLoader(dataset(20), batch_size=4, shuffle=True)) != passes[0]


def test_shuffle_seed_comes_from_the_generator_when_given() -> None:
    def build() -> DataLoader:
        return DataLoader(dataset(20), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))

    torch.manual_seed(1)
    first = ids(build())
    torch.manual_seed(2)
    assert ids(build()) == first


def test_only_a_shuffling_loader_draws_from_torchs_rng() -> None:
    state = torch.get_rng_state()
    DataLoader(dataset(5), batch_size=2)
    assert torch.equal(torch.get_rng_state(), state)
    DataLoader(dataset(5), batch_size=2, shuffle=True)
    assert not torch.equal(torch.get_rng_state(), state)


def test_torchs_argument_checks_and_defaults_apply() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(dataset(5), shuffle=True, sampler=torch.utils.data.SequentialSampler(range(5)))
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(dataset(5), batch_size=2, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(dataset(5), num_workers=-1)
    loader = DataLoader(dataset(5), batch_sampler=[[4, 0], [2]])
    assert ids(loader) == [[4, 0], [2]]
    assert loader.batch_size is None
    assert loader.collate_fn is torch.utils.data.default_collate


def test_refuses_what_it_cannot_shard_or_resume() -> None:
    class Stream(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(range(3))

    with pytest.raises(TypeError, match="IterableDataset"):
        DataLoader(Stream())
    with pytest.raises(ValueError, match="batch_size or batch_sampler"):
        DataLoader(dataset(5), batch_size=None)


def test_custom_sampler_and_collate_fn_are_kept() -> None:
    loader = DataLoader(
        dataset(6),
        batch_size=2,
        sampler=[5, 4, 3, 2, 1, 0],
        collate_fn=lambda items: [int(item[0]) for item in items],
    )
    assert list(loader) == [[5, 4], [3, 2], [1, 0]]


def test_get_data_loader_repeats_shards_and_skips() -> None:
    loader = DataLoader(dataset(10), batch_size=2)
    rank1 = loader.get_data_loader(repeat=True, skip=1, num_replicas=2, rank=1)
    got = []
    for batch in rank1:
        got.append(batch[0].tolist())
        if len(got) == 4:
            break
    # Global batches 0..4 = [0,1] [2,3] [4,5] [6,7] [8,9], repeated; rank 1 takes 1, 3, 5, 7...
    assert got == [[6, 7], [0, 1], [4, 5], [8, 9]]


# --- samplers ---------------------------------------------------------------------------------


def test_reproducible_shuffle_sampler() -> None:
    sampler = samplers.ReproducibleShuffleSampler(range(8), seed=11)
    epoch0, epoch1 = list(sampler), list(sampler)
    assert sorted(epoch0) == sorted(epoch1) == list(range(8))
    assert epoch0 != epoch1
    assert len(sampler) == 8
    sampler.set_epoch(1)
    assert list(sampler) == epoch1
    assert list(samplers.ReproducibleShuffleSampler(range(8), seed=11)) == epoch0
    assert list(samplers.ReproducibleShuffleSampler(range(8), seed=12)) != epoch0


def test_reproducible_shuffle_passes_set_epoch_on() -> None:
    inner = samplers.ReproducibleShuffleSampler(range(6), seed=1)
    outer = samplers.ReproducibleShuffleSampler(inner, seed=2)
    outer.set_epoch(5)
    assert inner._epoch == 5


def test_reproducible_shuffle_batch_sampler_keeps_batches_whole() -> None:
    batches = torch.utils.data.BatchSampler(range(10), batch_size=2, drop_last=False)
    shuffled = list(samplers.ReproducibleShuffleBatchSampler(batches, seed=3))
    assert sorted(shuffled) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_repeat_sampler() -> None:
    repeated = samplers.RepeatBatchSampler([[0], [1], [2]])
    it = iter(repeated)
    assert [next(it) for _ in range(7)] == [[0], [1], [2], [0], [1], [2], [0]]
    assert len(repeated) == 3
    assert len(samplers.RepeatSampler(range(4))) == 4


@pytest.mark.parametrize(("n", "workers"), [(10, 3), (9, 3), (2, 4), (0, 2)])
def test_distributed_sampler_splits_without_overlap(n: int, workers: int) -> None:
    shards = [list(samplers.DistributedSampler(range(n), workers, rank)) for rank in range(workers)]
    assert sorted(i for shard in shards for i in shard) == list(range(n))
    assert shards[0] == list(range(0, n, workers))
    lengths = {
        len(samplers.DistributedBatchSampler([[i] for i in range(n)], workers, r)) for r in range(workers)
    }
    assert lengths == {-(-n // workers)}


@pytest.mark.parametrize(("workers", "rank"), [(0, 0), (2, 2), (2, -1)])
def test_distributed_sampler_checks_rank(workers: int, rank: int) -> None:
    with pytest.raises(ValueError, match="num_workers|rank"):
        samplers.DistributedSampler(range(4), workers, rank)


def test_skip_sampler() -> None:
    assert list(samplers.SkipSampler(range(5), 2)) == [2, 3, 4]
    assert list(samplers.SkipBatchSampler([[0], [1]], 5)) == []
    assert len(samplers.SkipSampler(range(5), 2)) == 5
    with pytest.raises(ValueError, match="-1"):
        samplers.SkipSampler(range(5), -1)


def test_adapt_batch_sampler_order_is_repeat_shard_skip() -> None:
    base = [[i] for i in range(5)]
    adapted = adapt_batch_sampler(base, repeat=True, skip=2, num_replicas=2, rank=0)
    it = iter(adapted)
    # repeated: 0 1 2 3 4 0 1 2 3 4 ...; rank 0 of 2: 0 2 4 1 3 0 ...; skip 2 of those.
    assert [next(it) for _ in range(5)] == [[4], [1], [3], [0], [2]]
    assert adapt_batch_sampler(base) is base
    assert list(adapt_batch_sampler(base, num_replicas=2, rank=1)) == [[1], [3]]


# --- to_device, data_length -------------------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "label"])


def test_to_device_walks_nested_containers() -> None:
    t = torch.ones(2)
    batch = {"a": [t, (t, "name")], "b": Point(t, 3), "c": None, "d": 1.5}
    moved = to_device(batch, torch.device("meta"))
    assert moved["a"][0].device.type == "meta"
    assert isinstance(moved["a"][1], tuple)
    assert moved["a"][1][0].device.type == "meta"
    assert moved["a"][1][1] == "name"
    assert isinstance(moved["b"], Point)
    assert moved["b"].x.device.type == "meta"
    assert moved["b"].label == 3
    assert moved["c"] is None
    assert moved["d"] == 1.5
    assert t.device.type == "cpu"


def test_to_device_turns_numeric_arrays_into_tensors() -> None:
    moved = to_device([np.arange(3), np.array(["x"])], "cpu")
    assert isinstance(moved[0], torch.Tensor)
    assert moved[0].tolist() == [0, 1, 2]
    assert isinstance(moved[1], np.ndarray)


def test_to_device_calls_to_and_warns_once_per_type(caplog: pytest.LogCaptureFixture) -> None:
    class Movable:
        def to(self, device: Any) -> str:
            return f"moved to {device}"

    class Opaque:
        pass

    assert to_device(Movable(), "cpu") == "moved to cpu"
    warned: set[type] = set()
    with caplog.at_level(logging.WARNING, logger="determined.pytorch"):
        opaque = Opaque()
        assert to_device([opaque, Opaque()], "cpu", warned)[0] is opaque
        to_device(Opaque(), "cpu", warned)
    assert [r.getMessage() for r in caplog.records] == ["to_device leaves data of type Opaque where it is"]


def test_data_length() -> None:
    assert data_length(torch.zeros(4, 2)) == 4
    assert data_length(np.zeros(3)) == 3
    assert data_length({"x": torch.zeros(5), "y": torch.zeros(5)}) == 5
    assert data_length([torch.zeros(2), torch.zeros(2)]) == 2
    assert data_length((torch.zeros(6),)) == 6
    assert data_length({"names": ["a", "b"], "x": {"deep": [torch.zeros(7)]}}) == 7
    with pytest.raises(ValueError, match="no tensor"):
        data_length({})
    with pytest.raises(ValueError, match="no tensor"):
        data_length([])
    with pytest.raises(TypeError, match="str"):
        data_length("abc")
