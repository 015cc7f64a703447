"""`det.core.init(tensorboard_mode=...)` on a cluster with shared_fs storage, where the trial's
TensorBoard folder is in the storage (S3, where it is uploaded: the integration tests)."""

import pathlib
from collections.abc import Iterator

import pytest
from support.core_gateway import Server, set_trial_env

import determined as det
from determined.core import TensorboardMode


@pytest.fixture
def storage(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    set_trial_env(
        monkeypatch, gateway.port, {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    )
    yield tmp_path
    det.get_cluster_info.cache_clear()


def scalars(folder: pathlib.Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of the event files in `folder`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_auto_mode_writes_the_reported_metrics_as_scalars(storage: pathlib.Path) -> None:
    with det.core.init() as core_context:
        train = core_context.train
        train.report_training_metrics(
            4, {"loss": 0.5, "lr": 0.1}, batch_metrics=[{"loss": 0.75}, {"loss": 0.25}]
        )
        train.report_validation_metrics(4, {"accuracy": 0.9, "val_loss": 0.4, "note": "text"})
        train.report_metrics("custom", 4, {"x": 1.0})  # only training and validation are written
        assert train.get_tensorboard_path() == storage / "tensorboard" / "experiment" / "3" / "trial" / "7"
        with pytest.raises(RuntimeError, match="only be used in MANUAL mode"):
            train.upload_tensorboard_files()
    written = scalars(storage / "tensorboard" / "experiment" / "3" / "trial" / "7")
    assert written == {
        "loss": [(3, 0.75), (4, 0.25)],
        "lr": [(4, pytest.approx(0.1))],
        "val_accuracy": [(4, pytest.approx(0.9))],
        "val_loss": [(4, pytest.approx(0.4))],
    }


def test_manual_mode_writes_nothing_itself(storage: pathlib.Path) -> None:
    with det.core.init(tensorboard_mode=TensorboardMode.MANUAL) as core_context:
        core_context.train.report_training_metrics(1, {"loss": 0.5})
        core_context.train.upload_tensorboard_files()  # in place already: nothing to copy
    assert not (storage / "tensorboard").exists()
