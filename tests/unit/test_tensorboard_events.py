"""The scalars a trial writes in AUTO mode: which values, under which tags, and event files
that TensorBoard's own reader (which checks every record's CRC) reads back."""

import math
import pathlib

import pytest

from determined.tensorboard import scalars, tensorboard_tag
from determined.tensorboard._events import EventFileWriter, crc32c


def read_back(path: pathlib.Path) -> list[tuple[str, int, float]]:
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

    events = list(LegacyEventFileLoader(str(path)).Load())
    assert events[0].file_version == "brain.Event:2"
    return [
        (value.tag, event.step, value.simple_value) for event in events[1:] for value in event.summary.value
    ]


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_tensorboard_reads_what_is_written(tmp_path: pathlib.Path) -> None:
    writer = EventFileWriter(tmp_path / "run")
    writer.add_scalar("loss", 0.5, 3)
    writer.add_scalar("präzision/top-1", -2.25, 2**40)
    writer.add_scalar("zero", 0.0, 0)
    writer.close()
    assert writer.path.name.startswith("events.out.tfevents.")
    assert read_back(writer.path) == [("loss", 3, 0.5), ("präzision/top-1", 2**40, -2.25), ("zero", 0, 0.0)]


def test_two_writers_of_one_folder_write_files_of_their_own(tmp_path: pathlib.Path) -> None:
    first, second = EventFileWriter(tmp_path), EventFileWriter(tmp_path)
    assert first.path != second.path
    first.close()
    second.close()


def test_only_finite_numbers_are_scalars() -> None:
    metrics = {
        "loss": 1,
        "acc": 0.5,
        "nan": math.nan,
        "inf": math.inf,
        "flag": True,
        "name": "x",
        "none": None,
    }
    assert scalars("training", metrics) == {"loss": 1.0, "acc": 0.5}


@pytest.mark.parametrize(
    ("group", "name", "tag"),
    [
        ("validation", "loss", "val_loss"),
        ("validation", "val_loss", "val_loss"),
        ("validation", "validation_error", "validation_error"),
        ("training", "loss", "loss"),
    ],
)
def test_validation_metrics_get_the_val_prefix(group: str, name: str, tag: str) -> None:
    assert tensorboard_tag(group, name) == tag
