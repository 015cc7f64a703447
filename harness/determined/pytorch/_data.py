"""Data loading for PyTorchTrial: `det.pytorch.DataLoader` and what the Trainer draws from it.

A `det.pytorch.DataLoader` takes torch's arguments but builds its torch loaders late, once it
knows the worker's rank and where training resumes. Training then reads one endless stream of
batches (`_TrainingStream`): the per-worker batches of all workers, interleaved, make one
global sequence that runs pass after pass over the data,

    global batch g = batch_idx * size + rank,   epoch = g // N,   position = g % N

(N: batches per pass), as Determined's repeat → shard → skip chain of samplers does. So:

- every worker's epoch is `ceil(N / size)` batches, equal on all ranks so that collectives
  line up; when `size` does not divide N, the last global step of an epoch is completed with
  the first batches of the next pass: nothing is padded with duplicates and nothing dropped;
- the shuffle of pass e is a function of (seed, e) (`samplers.ReproducibleShuffleSampler`), so
  the stream can start at any batch_idx by computing its epoch and position, without replaying
  what came before: a resumed run sees exactly the batches an uninterrupted one would;
- the torch loaders built here get their own `torch.Generator`, so iterating them does not
  draw from torch's global RNG (which the Trainer checkpoints for dropout and the like).

A plain `torch.utils.data.DataLoader` is used as it is: not sharded, and resumed by iterating
and discarding the batches before the resume point within its epoch.
"""

import itertools
import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any, cast

import numpy as np
import torch
import torch.utils.data

from determined.pytorch import samplers

logger = logging.getLogger("determined.pytorch")

TorchData = dict[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor

_NO_BATCHES = (
    "the training data has no batches (an empty dataset, or drop_last=True with fewer records than one batch)"
)

# Messages already logged by _warn_once: each says something true of the whole process.
_warned: set[str] = set()
# Types to_device has warned about, when its caller keeps no set of its own.
_warned_types: set[type] = set()


class DataLoader:
    """A drop-in for `torch.utils.data.DataLoader` (same arguments) whose batches Determined
    can shard among workers and resume mid-epoch exactly.

    With `shuffle=True` the records are shuffled by a `samplers.ReproducibleShuffleSampler`
    whose seed is drawn once, here, from torch's RNG (from `generator` when given): the Trainer
    seeds torch with the trial seed before the trial builds its loaders, so the seed is the
    same in a resumed run. A custom `sampler` or `batch_sampler` should likewise be
    deterministic, or have `set_epoch(epoch)` (as torch's DistributedSampler does), which
    Determined calls before each pass.

    Iterable datasets are not supported (Determined cannot shard or skip them): use a plain
    torch DataLoader for those."""

    def __init__(
        self,
        dataset: torch.utils.data.Dataset[Any],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: torch.utils.data.Sampler[Any] | Iterable[Any] | None = None,
        batch_sampler: torch.utils.data.Sampler[list[Any]] | Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ) -> None:
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError(
                "det.pytorch.DataLoader does not take an IterableDataset: Determined cannot shard, "
                "shuffle or skip one. Return a torch.utils.data.DataLoader instead, and make the "
                "dataset shard and resume itself."
            )
        if batch_size is None and batch_sampler is None:
            raise ValueError(
                "det.pytorch.DataLoader needs batches: give batch_size or batch_sampler "
                "(batch_size=None without a batch_sampler is not supported)"
            )
        self._seed = torch.initial_seed()
        if shuffle and sampler is None and batch_sampler is None:
            self._seed = int(torch.randint(0, 2**62, (), generator=generator))
            sampler = samplers.ReproducibleShuffleSampler(
                torch.utils.data.SequentialSampler(cast(Sized, dataset)), self._seed
            )
            shuffle = False
        # torch checks the arguments and fills in the defaults (batch sampler, collate_fn...).
        template = torch.utils.data.DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate_fn,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        self.dataset = dataset
        self.batch_size = template.batch_size
        self.drop_last = template.drop_last
        self.sampler: Any = template.sampler
        self.batch_sampler: Any = template.batch_sampler
        self.num_workers = num_workers
        self.collate_fn = template.collate_fn
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = template.prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order

    def get_data_loader(
        self, repeat: bool = False, skip: int = 0, num_replicas: int = 1, rank: int = 0
    ) -> torch.utils.data.DataLoader[Any]:
        """A torch DataLoader over this loader's batches, through `adapt_batch_sampler`."""
        batch_sampler = adapt_batch_sampler(
            self.batch_sampler, repeat=repeat, skip=skip, num_replicas=num_replicas, rank=rank
        )
        return self._torch_loader(batch_sampler, self.generator)

    def __iter__(self) -> Iterator[Any]:
        """One pass, as torch's DataLoader gives (for use outside the Trainer)."""
        return iter(self.get_data_loader())

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def _torch_loader(
        self, batch_sampler: Iterable[list[Any]], generator: torch.Generator | None
    ) -> torch.utils.data.DataLoader[Any]:
        return torch.utils.data.DataLoader(
            self.dataset,
            batch_sampler=batch_sampler,
            num_workers=self.num_workers,
            collate_fn=self.collate_fn,
            pin_memory=self.pin_memory,
            timeout=self.timeout,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            generator=generator,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
            pin_memory_device=self.pin_memory_device,
            in_order=self.in_order,
        )

    def _own_generator(self) -> torch.Generator:
        """The generator for the Trainer's loaders: the user's, or a fresh one from this
        loader's seed (it only seeds the loader's worker processes)."""
        if self.generator is not None:
            return self.generator
        return torch.Generator().manual_seed(self._seed)

    def _set_epoch(self, epoch: int) -> None:
        samplers._set_epoch(self.sampler, epoch)
        samplers._set_epoch(self.batch_sampler, epoch)


_AnyLoader = DataLoader | torch.utils.data.DataLoader[Any]


def adapt_batch_sampler(
    batch_sampler: Iterable[list[Any]],
    repeat: bool = False,
    skip: int = 0,
    num_replicas: int = 1,
    rank: int = 0,
) -> Iterable[list[Any]]:
    """`batch_sampler` repeated forever (`repeat`), then sharded among `num_replicas` workers
    (this one being `rank`), then without its first `skip` batches (of this worker's share:
    skipping after sharding makes `skip` the count of batches this worker has trained)."""
    if repeat:
        batch_sampler = samplers.RepeatBatchSampler(batch_sampler)
    if num_replicas > 1:
        batch_sampler = samplers.DistributedBatchSampler(batch_sampler, num_replicas, rank)
    if skip > 0:
        batch_sampler = samplers.SkipBatchSampler(batch_sampler, skip)
    return batch_sampler


class _TrainingStream:
    """Training batches for one worker, forever, epoch after epoch, sharded by rank, starting
    at a given batch index; the same (seed, batch index) always gives the same batch.

    `epoch_len` is the number of batches ONE worker trains per epoch, the same on every rank.
    For a plain torch DataLoader it is the loader's length (`sys.maxsize` when it has none)."""

    def __init__(self, data: _AnyLoader, *, rank: int, size: int, first_batch: int) -> None:
        samplers._check_shard(size, rank)
        if first_batch < 0:
            raise ValueError(f"first_batch must be at least 0, not {first_batch}")
        self._data = data
        self._rank = rank
        self._size = size
        self._first_batch = first_batch
        if isinstance(data, DataLoader):
            self._pass_len = _pass_length(data)
            self.epoch_len = (self._pass_len + size - 1) // size
        elif isinstance(data, torch.utils.data.DataLoader):
            _warn_once(
                "the training data is a torch.utils.data.DataLoader, not a det.pytorch.DataLoader: "
                "it is used as it is, so every worker reads all of it unless its sampler shards it, "
                "and a resumed trial gets different batches from an uninterrupted one (it skips the "
                "batches already trained in the current epoch by loading and discarding them)"
            )
            try:
                self.epoch_len = len(data)
            except TypeError:
                self.epoch_len = sys.maxsize
            if self.epoch_len == 0:
                raise ValueError(_NO_BATCHES)
        else:
            raise TypeError(
                "the training data must be a det.pytorch.DataLoader or a torch.utils.data.DataLoader, "
                f"not {type(data).__name__}"
            )

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        """(batch_idx, batch) pairs, batch_idx counting from `first_batch`."""
        if isinstance(self._data, DataLoader):
            batches: Iterable[Any] = self._data._torch_loader(
                _ShardedPasses(self._data, self._pass_len, self._rank, self._size, self._first_batch),
                self._data._own_generator(),
            )
        else:
            batches = self._torch_passes(self._data)
        return enumerate(batches, start=self._first_batch)

    def _torch_passes(self, loader: torch.utils.data.DataLoader[Any]) -> Iterator[Any]:
        epoch, skip = divmod(self._first_batch, self.epoch_len)
        while True:
            samplers._set_epoch(loader.sampler, epoch)
            empty = True
            for batch in loader:
                empty = False
                if skip:
                    skip -= 1
                    continue
                yield batch
            if empty:
                raise ValueError(_NO_BATCHES)
            epoch += 1


class _ShardedPasses:
    """The batch sampler of a `_TrainingStream`: this worker's index batches, from the
    stream's first batch on, forever (see the module docstring for the arithmetic)."""

    def __init__(self, loader: DataLoader, pass_len: int, rank: int, size: int, first_batch: int) -> None:
        self._loader = loader
        self._pass_len = pass_len
        self._rank = rank
        self._size = size
        self._first_batch = first_batch

    def __iter__(self) -> Iterator[list[Any]]:
        n = self._pass_len
        g = self._first_batch * self._size + self._rank
        while True:
            epoch, position = divmod(g, n)
            self._loader._set_epoch(epoch)
            for batch in itertools.islice(self._loader.batch_sampler, position, n, self._size):
                yield batch
                g += self._size
            if g < (epoch + 1) * n:
                raise RuntimeError(
                    f"the training batch sampler yielded fewer batches than its length ({n}); "
                    "Determined needs its length to be right to shard and resume it"
                )


def _validation_batches(data: _AnyLoader, *, rank: int, size: int) -> Iterable[Any]:
    """This worker's shard of one pass over validation data: batches rank, rank + size, ...
    (shards differ in length by at most one batch; nothing is padded, so every batch counts
    once in the metrics). The order is the same at every validation: a shuffling loader is
    set to its epoch 0. A plain torch DataLoader is returned as it is, on every rank.

    For `evaluate_full_dataset` (chief only) pass rank=0, size=1: the whole pass."""
    samplers._check_shard(size, rank)
    if isinstance(data, torch.utils.data.DataLoader):
        return data
    if not isinstance(data, DataLoader):
        raise TypeError(
            "the validation data must be a det.pytorch.DataLoader or a torch.utils.data.DataLoader, "
            f"not {type(data).__name__}"
        )
    data._set_epoch(0)
    batch_sampler = data.batch_sampler if size == 1 else _Shard(data.batch_sampler, rank, size)
    return data._torch_loader(batch_sampler, data._own_generator())


class _Shard(torch.utils.data.Sampler[list[Any]]):
    """Batches rank, rank + size, ... of one pass, with this rank's exact length (unlike
    `samplers.DistributedBatchSampler`, whose length is the largest shard's on every rank)."""

    def __init__(self, batch_sampler: Iterable[list[Any]], rank: int, size: int) -> None:
        self._batch_sampler = batch_sampler
        self._rank = rank
        self._size = size

    def __iter__(self) -> Iterator[list[Any]]:
        return itertools.islice(self._batch_sampler, self._rank, None, self._size)

    def __len__(self) -> int:
        return (samplers._length(self._batch_sampler) - self._rank + self._size - 1) // self._size


def _pass_length(loader: DataLoader) -> int:
    try:
        n = len(loader)
    except TypeError as e:
        raise TypeError(
            "the training batch sampler has no length: Determined needs it to shard the data and "
            "to resume mid-epoch"
        ) from e
    if n == 0:
        raise ValueError(_NO_BATCHES)
    return n


def data_length(data: Any) -> int:
    """The batch size of a batch: the length of its first tensor or array, looking through
    dicts, lists and tuples (every leaf of a batch is assumed to have the same length)."""
    if isinstance(data, (torch.Tensor, np.ndarray)):
        return len(data)
    if isinstance(data, dict):
        children: list[Any] = list(data.values())
    elif isinstance(data, (list, tuple)):
        children = list(data)
    else:
        raise TypeError(f"cannot tell the length of a batch of type {type(data).__name__}")
    for child in children:
        try:
            return data_length(child)
        except (TypeError, ValueError):
            continue
    raise ValueError(
        f"cannot tell the length of this batch: the {type(data).__name__} holds no tensor or array"
    )


def to_device(data: Any, device: torch.device | str, warned_types: set[type] | None = None) -> Any:
    """`data` with every tensor moved to `device`, through nested dicts, lists and tuples
    (named tuples keep their type). Numeric numpy arrays become tensors there too, and any
    object with a `to()` method gets `to(device)`, as in Determined. Strings, numbers and
    None stay as they are; another type stays too, with a warning once per type (per
    `warned_types` when given, else per process)."""
    if isinstance(data, dict):
        return {key: to_device(value, device, warned_types) for key, value in data.items()}
    if isinstance(data, list):
        return [to_device(item, device, warned_types) for item in data]
    if isinstance(data, tuple):
        items = [to_device(item, device, warned_types) for item in data]
        return type(data)(*items) if hasattr(data, "_fields") else tuple(items)
    if isinstance(data, np.ndarray) and data.dtype.kind in "biufc":
        return torch.from_numpy(data).to(device)
    to = getattr(data, "to", None)
    if callable(to):
        return to(device)
    if data is not None and not isinstance(data, (str, bytes, int, float, complex)):
        warned = _warned_types if warned_types is None else warned_types
        if type(data) not in warned:
            warned.add(type(data))
            logger.warning(f"to_device leaves data of type {type(data).__name__} where it is")
    return data


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)
