"""Building blocks for reproducible, sharded, resumable sampling, as in Determined.

Each wraps a sampler (yielding dataset indices) or a batch sampler (yielding lists of
indices) and changes how it is walked: shuffled from a seed, repeated forever, sharded
among workers, or with a prefix skipped. `det.pytorch.DataLoader` builds its chains from
them; they work as well in a plain `torch.utils.data.DataLoader`.

Shuffle before you skip or repeat: a repeated sampler never ends, and skipping before a
shuffle would change which items are shuffled.
"""

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Any, TypeVar

import numpy as np
import torch.utils.data

T = TypeVar("T")


class ReproducibleShuffleSampler(torch.utils.data.Sampler[T]):
    """The items of `sampler` in an order that depends only on `seed` and the epoch.

    Each pass is a new permutation: epoch 0 for the first pass, then 1, 2... unless
    `set_epoch(epoch)` picks the epoch of the next pass (and is passed on to `sampler` when
    it has a `set_epoch` too). The same (seed, epoch) always gives the same order, so a
    resumed run can recreate any epoch without replaying the ones before it."""

    def __init__(self, sampler: Iterable[T], seed: int) -> None:
        self._sampler = sampler
        self._seed = seed
        self._epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch
        _set_epoch(self._sampler, epoch)

    def __iter__(self) -> Iterator[T]:
        # Not a generator: the epoch is read now, not at the first next().
        items = list(self._sampler)
        order = _permutation(len(items), self._seed, self._epoch)
        self._epoch += 1
        return iter([items[i] for i in order])

    def __len__(self) -> int:
        return _length(self._sampler)


class ReproducibleShuffleBatchSampler(ReproducibleShuffleSampler[list[int]]):
    """`ReproducibleShuffleSampler` for a batch sampler: shuffles the order of whole batches,
    whose contents stay the same every epoch (shuffling records, before batching, mixes
    better; prefer it where you can)."""


class RepeatSampler(torch.utils.data.Sampler[T]):
    """The items of `sampler`, pass after pass, forever. Its length is one pass's."""

    def __init__(self, sampler: Iterable[T]) -> None:
        self._sampler = sampler

    def __iter__(self) -> Iterator[T]:
        while True:
            yield from self._sampler

    def __len__(self) -> int:
        return _length(self._sampler)


class RepeatBatchSampler(RepeatSampler[list[int]]):
    """`RepeatSampler` for a batch sampler."""


class DistributedSampler(torch.utils.data.Sampler[T]):
    """This worker's share of `sampler`: items `rank`, `rank + num_workers`, ...

    Unlike `torch.utils.data.DistributedSampler` it neither shuffles nor pads: it is one
    link of a chain, over any sampler. Its length is the same on every rank (that of the
    largest share, as in Determined), so that workers agree on how long an epoch is; over a
    finite sampler whose length `num_workers` does not divide, some ranks yield one item
    fewer than the length says. Repeat before sharding to keep every worker busy."""

    def __init__(self, sampler: Iterable[T], num_workers: int, rank: int) -> None:
        _check_shard(num_workers, rank)
        self._sampler = sampler
        self._num_workers = num_workers
        self._rank = rank

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._sampler, self._rank, None, self._num_workers)

    def __len__(self) -> int:
        return (_length(self._sampler) + self._num_workers - 1) // self._num_workers


class DistributedBatchSampler(DistributedSampler[list[int]]):
    """`DistributedSampler` for a batch sampler: this worker's share of the batches."""


class SkipSampler(torch.utils.data.Sampler[T]):
    """`sampler` without its first `skip` items. Its length stays that of `sampler`: it is
    meant to go around a repeated sampler, where the skip happens once, on resume."""

    def __init__(self, sampler: Iterable[T], skip: int) -> None:
        if skip < 0:
            raise ValueError(f"skip must be at least 0, not {skip}")
        self._sampler = sampler
        self._skip = skip

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self._sampler, self._skip, None)

    def __len__(self) -> int:
        return _length(self._sampler)


class SkipBatchSampler(SkipSampler[list[int]]):
    """`SkipSampler` for a batch sampler: skips whole batches (what resuming needs, since
    progress is counted in batches)."""


def _set_epoch(sampler: Any, epoch: int) -> None:
    """Tell a sampler which epoch comes next, if it cares (ours and torch's
    DistributedSampler have `set_epoch`)."""
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)


def _permutation(n: int, seed: int, epoch: int) -> list[int]:
    # SeedSequence mixes (seed, epoch) into independent streams; it takes non-negative ints.
    rng = np.random.default_rng([seed % 2**64, epoch])
    order: list[int] = rng.permutation(n).tolist()
    return order


def _length(sampler: object) -> int:
    if not isinstance(sampler, Sized):
        raise TypeError(f"{type(sampler).__name__} has no length")
    return len(sampler)


def _check_shard(num_workers: int, rank: int) -> None:
    if num_workers < 1:
        raise ValueError(f"num_workers must be at least 1, not {num_workers}")
    if not 0 <= rank < num_workers:
        raise ValueError(f"rank must be in [0, {num_workers}), not {rank}")
