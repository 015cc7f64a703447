"""Training lengths and periods for the Trainer: `Batch(n)`, `Epoch(n)` and `Record(n)`."""

from typing import Any


class TrainUnit:
    """A count of training progress in one unit; the subclass names the unit.

    Used for `Trainer.fit`'s `max_length` and for its validation, checkpoint and reporting
    periods. The value is a count of at least 0 (what 0 means is up to the caller)."""

    def __init__(self, value: int) -> None:
        self.value = _checked_count(value, type(self).__name__)

    @staticmethod
    def _from_values(
        batches: int | None = None, records: int | None = None, epochs: int | None = None
    ) -> "TrainUnit":
        """The unit of the one count given, e.g. `_from_values(epochs=2) == Epoch(2)`."""
        given = {
            name: value
            for name, value in (("batches", batches), ("records", records), ("epochs", epochs))
            if value is not None
        }
        if len(given) != 1:
            raise ValueError(f"give exactly one of batches, records or epochs, not {given or 'none of them'}")
        ((name, value),) = given.items()
        return _UNIT_OF[name](value)

    @staticmethod
    def _from_length(length: dict[str, int] | int) -> "TrainUnit":
        """A length as an experiment config writes it: `{"batches": 5}`, `{"records": 640}`,
        `{"epochs": 2}`, or a bare integer, which counts batches."""
        if isinstance(length, dict):
            if len(length) != 1 or next(iter(length)) not in _UNIT_OF:
                raise ValueError(
                    f"a length is one of {{batches: N}}, {{records: N}} or {{epochs: N}}, not {length!r}"
                )
            ((name, value),) = length.items()
            return _UNIT_OF[name](value)
        if isinstance(length, int) and not isinstance(length, bool):
            return Batch(length)
        raise ValueError(
            f"a length is an integer (batches) or one of {{batches: N}}, {{records: N}} or "
            f"{{epochs: N}}, not {length!r}"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TrainUnit):
            return NotImplemented
        return type(self) is type(other) and self.value == other.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value})"


class Batch(TrainUnit):
    """A number of batches (per worker: each training step every worker trains one batch)."""


class Epoch(TrainUnit):
    """A number of passes over the training data, as long as the training loader's epoch."""


class Record(TrainUnit):
    """A number of training records (samples), counted across all workers."""


_UNIT_OF: dict[str, type[TrainUnit]] = {"batches": Batch, "records": Record, "epochs": Epoch}


def _checked_count(value: Any, unit: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{unit} needs a whole number of at least 0, not {value!r}")
    return value
