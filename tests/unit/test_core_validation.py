"""Mistakes in what a script reports fail at the call, naming the argument."""

import math
import re
from typing import Any

import pytest

import determined as det
from determined.core import _validate


@pytest.fixture
def train() -> det.core.TrainContext:
    return det.core.DummyTrainContext()


@pytest.mark.parametrize(
    ("steps", "error", "message"),
    [
        (True, TypeError, "steps_completed must be an int, got bool"),
        (1.0, TypeError, "steps_completed must be an int, got float"),
        ("3", TypeError, "steps_completed must be an int, got str"),
        (-1, ValueError, "steps_completed must be >= 0, got -1"),
    ],
)
def test_steps_completed_must_be_a_non_negative_int(
    train: det.core.TrainContext, steps: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        train.report_training_metrics(steps, {"loss": 1.0})


@pytest.mark.parametrize(
    ("metrics", "error", "message"),
    [
        ([("loss", 1.0)], TypeError, "metrics must be a dict, got list"),
        ({1: 1.0}, TypeError, "metrics keys must be str, got int key 1"),
        ({"loss": object()}, TypeError, r"metrics\['loss'\] must be a number.*got object"),
        ({"loss": {"a": {2}}}, TypeError, r"metrics\['loss'\]\['a'\] must be a number.*got set"),
        ({"loss": b"x"}, TypeError, r"metrics\['loss'\] must be a number.*got bytes"),
    ],
)
def test_metrics_must_be_a_dict_of_json_values(
    train: det.core.TrainContext, metrics: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        train.report_training_metrics(1, metrics)


def test_validation_metrics_may_not_be_none(train: det.core.TrainContext) -> None:
    with pytest.raises(ValueError, match=r"metrics\['val_loss'\] is None"):
        train.report_validation_metrics(1, {"val_loss": None})
    with pytest.raises(ValueError, match="is None"):
        train.report_metrics("validation", 1, {"val_loss": None})
    train.report_training_metrics(1, {"loss": None})


def test_batch_metrics_are_checked(train: det.core.TrainContext) -> None:
    with pytest.raises(TypeError, match="batch_metrics must be a list of dicts, got dict"):
        train.report_training_metrics(1, {"loss": 1.0}, batch_metrics={"loss": 1.0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"batch_metrics\[1\] must be a dict"):
        train.report_training_metrics(1, {"loss": 1.0}, batch_metrics=[{"loss": 1.0}, 3])  # type: ignore[list-item]


@pytest.mark.parametrize(("group", "error"), [("", ValueError), ("a.b", ValueError), (3, TypeError)])
def test_a_group_is_a_non_empty_name_without_dots(
    train: det.core.TrainContext, group: Any, error: type
) -> None:
    with pytest.raises(error, match="group must be"):
        train.report_metrics(group, 1, {"x": 1})


@pytest.mark.parametrize(("progress", "error"), [(-0.1, ValueError), (1.5, ValueError), ("0.5", TypeError)])
def test_progress_is_a_fraction(train: det.core.TrainContext, progress: Any, error: type) -> None:
    with pytest.raises(error, match="progress must be"):
        train.report_progress(progress)


def test_the_checked_copy_is_plain_json_and_independent_of_the_caller() -> None:
    class Scalar:  # stands in for numpy scalars and torch tensors
        def tolist(self) -> float:
            return 2.5

    nested = [1, 2]
    metrics = {"a": nested, "b": (1, "x", True), "c": Scalar(), "d": {"e": None}}
    copy = _validate.check_metrics(metrics)
    nested.append(3)
    assert copy == {"a": [1, 2], "b": [1, "x", True], "c": 2.5, "d": {"e": None}}


def test_non_finite_floats_become_strings() -> None:
    copy = _validate.check_metrics({"a": math.nan, "b": math.inf, "c": -math.inf, "d": 1.5})
    assert copy == {"a": "NaN", "b": "Infinity", "c": "-Infinity", "d": 1.5}


@pytest.mark.parametrize(
    ("searcher", "required"),
    [
        ({"name": "single", "metric": "validation_loss"}, {"validation_loss": "searcher.metric"}),
        ({"name": "single", "metric": None}, {}),
        (
            {"name": "adaptive_asha", "metric": "validation_loss", "time_metric": "batches"},
            {"validation_loss": "searcher.metric", "batches": "searcher.time_metric"},
        ),
        (
            {"name": "async_halving", "metric": "loss", "max_length": {"batches": 937}, "time_metric": None},
            {"loss": "searcher.metric"},
        ),
        ({"name": "random", "metric": "loss", "time_metric": "batches"}, {"loss": "searcher.metric"}),
    ],
)
def test_the_searcher_metrics_a_validation_needs(searcher: dict[str, Any], required: dict[str, str]) -> None:
    assert _validate.searcher_metrics(searcher) == required


@pytest.mark.parametrize(
    ("metrics", "error", "message"),
    [
        (
            {"loss": 1.0, "accuracy": 0.5},
            ValueError,
            (
                "validation metrics must include the searcher metric 'validation_loss' (searcher.metric); "
                "reported: loss, accuracy"
            ),
        ),
        (
            {"validation_loss": 1.0},
            ValueError,
            (
                "validation metrics must include the time metric 'batches' (searcher.time_metric); "
                "reported: validation_loss"
            ),
        ),
        ({}, ValueError, "searcher metric 'validation_loss' (searcher.metric); reported: nothing"),
        ({"validation_loss": True, "batches": 1}, TypeError, "(searcher.metric) must be a number, got bool"),
        ({"validation_loss": "0.5", "batches": 1}, TypeError, "must be a number, got str"),
        (
            {"validation_loss": 0.5, "batches": [1]},
            TypeError,
            "'batches' (searcher.time_metric) must be a number",
        ),
    ],
)
def test_a_validation_without_the_searcher_metrics_is_refused(
    metrics: dict[str, Any], error: type[Exception], message: str
) -> None:
    required = {"validation_loss": "searcher.metric", "batches": "searcher.time_metric"}
    with pytest.raises(error, match=re.escape(message)):
        _validate.check_searcher_metrics(metrics, required)


def test_numbers_of_any_kind_satisfy_the_searcher() -> None:
    class Scalar:  # numpy scalars and 0-d tensors
        def tolist(self) -> float:
            return 0.5

    required = {"validation_loss": "searcher.metric", "batches": "searcher.time_metric"}
    for loss in (0.5, 1, math.nan, math.inf, Scalar()):
        _validate.check_searcher_metrics({"validation_loss": loss, "batches": 58}, required)
