"""The Trainer's view of the data: `_TrainingStream` (sharded, endless, resumable at any
batch) and `_validation_batches` (this worker's shard of one pass)."""

import itertools
import logging
import sys
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from determined.pytorch import _data
from determined.pytorch._data import DataLoader, _TrainingStream, _validation_batches

torch.set_num_threads(1)


def dataset(n: int) -> torch.utils.data.TensorDataset:
    return torch.utils.data.TensorDataset(torch.arange(n))


def loader(
    n: int, batch_size: int, *, drop_last: bool = False, shuffle: bool = True, seed: int = 0
) -> DataLoader:
    torch.manual_seed(seed)
    return DataLoader(dataset(n), batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)


def take(stream: _TrainingStream, count: int) -> list[tuple[int, list[int]]]:
    return [(idx, batch[0].tolist()) for idx, batch in itertools.islice(stream, count)]


def batches_per_pass(n: int, batch_size: int, drop_last: bool) -> int:
    return n // batch_size if drop_last else -(-n // batch_size)


# Small shapes that still cover the edges: partial last batches, more workers than batches,
# worker counts that do not divide the batches.
shapes = st.tuples(
    st.integers(1, 23),  # records
    st.integers(1, 5),  # batch size
    st.booleans(),  # drop_last
    st.integers(1, 4),  # workers
).filter(lambda s: not s[2] or s[0] >= s[1])


@settings(max_examples=60, deadline=None)
@given(shape=shapes, data=st.data())
def test_resuming_at_batch_k_gives_the_tail_of_an_uninterrupted_stream(shape: Any, data: Any) -> None:
    n, batch_size, drop_last, size = shape
    rank = data.draw(st.integers(0, size - 1))
    first = data.draw(st.integers(0, 40))
    whole = take(
        _TrainingStream(loader(n, batch_size, drop_last=drop_last), rank=rank, size=size, first_batch=0),
        first + 12,
    )
    resumed = take(
        _TrainingStream(loader(n, batch_size, drop_last=drop_last), rank=rank, size=size, first_batch=first),
        12,
    )
    assert resumed == whole[first:]
    assert [idx for idx, _ in resumed] == list(range(first, first + 12))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, passes=st.integers(1, 3))
def test_shards_are_disjoint_and_cover_every_pass(shape: Any, passes: int) -> None:
    n, batch_size, drop_last, size = shape
    per_pass = batches_per_pass(n, batch_size, drop_last)
    streams = [
        _TrainingStream(loader(n, batch_size, drop_last=drop_last), rank=r, size=size, first_batch=0)
        for r in range(size)
    ]
    epoch_len = -(-per_pass // size)
    assert {s.epoch_len for s in streams} == {epoch_len}
    # Rebuild the global sequence: worker r's k-th batch is global batch k * size + r.
    steps = -(-passes * per_pass // size)
    per_worker = [take(s, steps) for s in streams]
    global_batches = [per_worker[r][k][1] for k in range(steps) for r in range(size)]
    expected_records = n - n % batch_size if drop_last else n
    for p in range(passes):
        one_pass = global_batches[p * per_pass : (p + 1) * per_pass]
        records = [i for batch in one_pass for i in batch]
        assert len(records) == len(set(records)) == expected_records
        if not drop_last:
            assert sorted(records) == list(range(n))


@settings(max_examples=40, deadline=None)
@given(shape=shapes, data=st.data())
def test_stream_equals_determineds_repeat_shard_skip_chain(shape: Any, data: Any) -> None:
    n, batch_size, drop_last, size = shape
    rank = data.draw(st.integers(0, size - 1))
    first = data.draw(st.integers(0, 30))
    ours = take(
        _TrainingStream(loader(n, batch_size, drop_last=drop_last), rank=rank, size=size, first_batch=first),
        10,
    )
    chain = loader(n, batch_size, drop_last=drop_last).get_data_loader(
        repeat=True, skip=first, num_replicas=size, rank=rank
    )
    assert [batch for _, batch in ours] == [b[0].tolist() for b in itertools.islice(chain, 10)]


@pytest.mark.parametrize(
    ("n", "batch_size", "drop_last", "size", "epoch_len"),
    [
        (10, 2, False, 1, 5),
        (10, 3, False, 1, 4),
        (10, 3, True, 1, 3),
        (10, 3, False, 2, 2),
        (10, 3, True, 2, 2),
        (10, 3, True, 3, 1),
        (10, 3, False, 3, 2),
        (3, 1, False, 8, 1),
    ],
)
def test_epoch_len(n: int, batch_size: int, drop_last: bool, size: int, epoch_len: int) -> None:
    for rank in range(size):
        stream = _TrainingStream(
            loader(n, batch_size, drop_last=drop_last), rank=rank, size=size, first_batch=0
        )
        assert stream.epoch_len == epoch_len


def test_same_seed_same_batches_and_each_pass_reshuffled() -> None:
    def stream(seed: int) -> list[tuple[int, list[int]]]:
        return take(_TrainingStream(loader(12, 4, seed=seed), rank=0, size=1, first_batch=0), 9)

    assert stream(5) == stream(5)
    assert stream(5) != stream(6)
    passes = [sorted(tuple(b) for _, b in stream(5)[p * 3 : p * 3 + 3]) for p in range(3)]
    assert passes[0] != passes[1]
    unshuffled = take(_TrainingStream(loader(5, 2, shuffle=False), rank=0, size=1, first_batch=0), 4)
    assert unshuffled == [(0, [0, 1]), (1, [2, 3]), (2, [4]), (3, [0, 1])]


def test_batches_do_not_depend_on_what_else_the_process_does() -> None:
    first = take(_TrainingStream(loader(12, 4), rank=0, size=1, first_batch=3), 4)
    data = loader(12, 4)
    list(data)  # iterating the loader elsewhere (e.g. for validation) moves its sampler on
    list(_validation_batches(data, rank=0, size=1))
    torch.rand(5)
    assert take(_TrainingStream(data, rank=0, size=1, first_batch=3), 4) == first


def test_the_stream_leaves_torchs_rng_alone() -> None:
    data = loader(12, 4)
    state = torch.get_rng_state()
    take(_TrainingStream(data, rank=0, size=1, first_batch=2), 7)
    list(_validation_batches(data, rank=0, size=1))
    assert torch.equal(torch.get_rng_state(), state)


def test_worker_processes_give_the_same_batches() -> None:
    torch.manual_seed(0)
    data = DataLoader(dataset(12), batch_size=4, shuffle=True, num_workers=2)
    in_process = take(_TrainingStream(loader(12, 4), rank=1, size=2, first_batch=1), 5)
    assert take(_TrainingStream(data, rank=1, size=2, first_batch=1), 5) == in_process


def test_sampler_with_set_epoch_is_told_each_epoch() -> None:
    sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        dataset(8), num_replicas=1, rank=0, shuffle=True, seed=4
    )
    data = DataLoader(dataset(8), batch_size=4, sampler=sampler)
    got = take(_TrainingStream(data, rank=0, size=1, first_batch=0), 6)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        expected = list(sampler)
        assert got[2 * epoch][1] + got[2 * epoch + 1][1] == expected


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rank"):
        _TrainingStream(loader(4, 2), rank=2, size=2, first_batch=0)
    with pytest.raises(ValueError, match="first_batch"):
        _TrainingStream(loader(4, 2), rank=0, size=1, first_batch=-1)
    with pytest.raises(ValueError, match="no batches"):
        _TrainingStream(DataLoader(dataset(3), batch_size=4, drop_last=True), rank=0, size=1, first_batch=0)
    with pytest.raises(TypeError, match="list"):
        _TrainingStream([[1]], rank=0, size=1, first_batch=0)  # type: ignore[arg-type]


def test_a_batch_sampler_shorter_than_its_length_is_an_error() -> None:
    class Liar(torch.utils.data.Sampler[list[int]]):
        def __iter__(self) -> Any:
            return iter([[0], [1]])

        def __len__(self) -> int:
            return 3

    stream = _TrainingStream(DataLoader(dataset(4), batch_sampler=Liar()), rank=0, size=1, first_batch=0)
    with pytest.raises(RuntimeError, match="fewer batches than its length"):
        take(stream, 3)


# --- a plain torch DataLoader -----------------------------------------------------------------


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_data, "_warned", set())


def test_plain_loader_is_used_as_is_and_warned_about_once(
    fresh_warnings: None, caplog: pytest.LogCaptureFixture
) -> None:
    plain = torch.utils.data.DataLoader(dataset(5), batch_size=2)
    with caplog.at_level(logging.WARNING, logger="determined.pytorch"):
        stream = _TrainingStream(plain, rank=1, size=2, first_batch=0)
        _TrainingStream(plain, rank=1, size=2, first_batch=0)
    assert len(caplog.records) == 1
    assert "torch.utils.data.DataLoader" in caplog.records[0].getMessage()
    assert stream.epoch_len == 3
    assert take(stream, 4) == [(0, [0, 1]), (1, [2, 3]), (2, [4]), (3, [0, 1])]


def test_plain_loader_resumes_by_discarding_within_the_epoch(fresh_warnings: None) -> None:
    plain = torch.utils.data.DataLoader(dataset(5), batch_size=2)
    assert take(_TrainingStream(plain, rank=0, size=1, first_batch=7), 3) == [
        (7, [2, 3]),
        (8, [4]),
        (9, [0, 1]),
    ]


def test_plain_loader_without_length(fresh_warnings: None) -> None:
    class Counting(torch.utils.data.IterableDataset[tuple[int]]):
        def __iter__(self) -> Any:
            return iter((i,) for i in range(3))

    plain = torch.utils.data.DataLoader(Counting(), batch_size=2)
    stream = _TrainingStream(plain, rank=0, size=1, first_batch=3)
    assert stream.epoch_len == sys.maxsize
    # No length, no epochs to skip whole: the first 3 batches of the endless repetition go.
    assert take(stream, 3) == [(3, [2]), (4, [0, 1]), (5, [2])]


def test_plain_loader_that_yields_nothing(fresh_warnings: None) -> None:
    with pytest.raises(ValueError, match="no batches"):
        _TrainingStream(torch.utils.data.DataLoader(dataset(0), batch_size=2), rank=0, size=1, first_batch=0)

    class Nothing(torch.utils.data.IterableDataset[int]):
        def __iter__(self) -> Any:
            return iter(())

    stream = _TrainingStream(
        torch.utils.data.DataLoader(Nothing(), batch_size=2), rank=0, size=1, first_batch=0
    )
    with pytest.raises(ValueError, match="no batches"):
        take(stream, 1)


def test_plain_loader_sampler_gets_set_epoch(fresh_warnings: None) -> None:
    sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        dataset(6), num_replicas=2, rank=0, seed=1
    )
    plain = torch.utils.data.DataLoader(dataset(6), batch_size=3, sampler=sampler)
    got = take(_TrainingStream(plain, rank=0, size=2, first_batch=1), 2)
    sampler.set_epoch(1)
    assert got[0][1] == list(sampler)


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "batch_size", "size"), [(10, 3, 2), (10, 2, 3), (3, 2, 4), (12, 3, 4)])
def test_validation_shards_are_disjoint_exact_and_repeatable(n: int, batch_size: int, size: int) -> None:
    data = loader(n, batch_size)
    shards = [[b[0].tolist() for b in _validation_batches(data, rank=r, size=size)] for r in range(size)]
    records = [i for shard in shards for batch in shard for i in batch]
    assert sorted(records) == list(range(n))
    for rank, shard in enumerate(shards):
        assert len(_validation_batches(data, rank=rank, size=size)) == len(shard)  # type: ignore[arg-type]
        again = [b[0].tolist() for b in _validation_batches(data, rank=rank, size=size)]
        assert again == shard
    whole = [b[0].tolist() for b in _validation_batches(data, rank=0, size=1)]
    assert [batch for r in range(size) for batch in whole[r::size]] == [b for shard in shards for b in shard]


def test_validation_with_a_plain_loader_is_the_loader() -> None:
    plain = torch.utils.data.DataLoader(dataset(4), batch_size=2)
    assert _validation_batches(plain, rank=1, size=2) is plain
    with pytest.raises(TypeError, match="validation data"):
        _validation_batches([[0]], rank=0, size=1)  # type: ignore[arg-type]


def test_pause_and_resume_gives_the_same_losses() -> None:
    """What the Trainer does: seed, build the model and loader, restore the generator state
    of the checkpoint, stream from the batch it stopped at; dropout masks and batches match."""

    def run(stop: int, resume_from: tuple[int, Any] | None = None) -> tuple[list[float], Any]:
        torch.manual_seed(42)
        model = torch.nn.Sequential(torch.nn.Linear(1, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = DataLoader(dataset(10), batch_size=3, shuffle=True)
        first = 0
        if resume_from is not None:
            first, saved = resume_from
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            torch.set_rng_state(saved["rng"])
        losses = []
        for idx, (x,) in _TrainingStream(data, rank=0, size=1, first_batch=first):
            if idx == stop:
                break
            loss = (model(x.float().unsqueeze(1) / 10) - 1).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
        }
        return losses, state

    uninterrupted, _ = run(stop=11)
    before, saved = run(stop=5)
    after, _ = run(stop=11, resume_from=(5, saved))
    assert before + after == uninterrupted
