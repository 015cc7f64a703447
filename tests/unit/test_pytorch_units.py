"""`det.pytorch.Batch/Epoch/Record`: the training lengths the Trainer counts in."""

from typing import Any

import pytest

from determined.pytorch._units import Batch, Epoch, Record, TrainUnit


def test_value_repr_and_equality() -> None:
    assert Batch(5).value == 5
    assert repr(Batch(5)) == "Batch(5)"
    assert repr(Epoch(0)) == "Epoch(0)"
    assert repr(Record(640)) == "Record(640)"
    assert Batch(5) == Batch(5)
    assert Batch(5) != Batch(6)
    assert Batch(5) != Epoch(5)
    assert Epoch(5) != Record(5)
    assert Batch(5) != 5
    assert len({Batch(5), Batch(5), Epoch(5)}) == 2
    assert all(isinstance(u, TrainUnit) for u in (Batch(1), Epoch(1), Record(1)))


@pytest.mark.parametrize("bad", [-1, 1.5, "5", None, True])
def test_bad_values_are_refused_by_name(bad: Any) -> None:
    with pytest.raises(ValueError, match=rf"Epoch.*{bad!r}"):
        Epoch(bad)


def test_from_values() -> None:
    assert TrainUnit._from_values(batches=3) == Batch(3)
    assert TrainUnit._from_values(records=64) == Record(64)
    assert TrainUnit._from_values(epochs=2) == Epoch(2)
    assert TrainUnit._from_values(epochs=0) == Epoch(0)


@pytest.mark.parametrize(
    "kwargs", [{}, {"batches": 1, "epochs": 1}, {"batches": 1, "records": 1, "epochs": 1}]
)
def test_from_values_needs_exactly_one(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        TrainUnit._from_values(**kwargs)


def test_from_values_checks_the_count() -> None:
    with pytest.raises(ValueError, match="-3"):
        TrainUnit._from_values(records=-3)


def test_from_length() -> None:
    assert TrainUnit._from_length({"batches": 5}) == Batch(5)
    assert TrainUnit._from_length({"records": 640}) == Record(640)
    assert TrainUnit._from_length({"epochs": 2}) == Epoch(2)
    assert TrainUnit._from_length(7) == Batch(7)
    assert TrainUnit._from_length(0) == Batch(0)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({}, "{}"),
        ({"steps": 5}, "{'steps': 5}"),
        ({"batches": 5, "epochs": 1}, "{'batches': 5, 'epochs': 1}"),
        (True, "True"),
        ("5", "'5'"),
        ([5], "[5]"),
        ({"epochs": -1}, "Epoch needs a whole number of at least 0, not -1"),
        (-2, "Batch needs a whole number of at least 0, not -2"),
    ],
)
def test_from_length_refuses_what_is_not_a_length(bad: Any, named: str) -> None:
    with pytest.raises(ValueError) as raised:
        TrainUnit._from_length(bad)
    assert named in str(raised.value)
