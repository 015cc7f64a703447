"""Determined 0.38's Core API where scripts written for it differ from the `with` form: a
validation without the searcher metric (accepted unless the search is adaptive, at the call
and at the gateway), `Context.start()` / `close()`, `core_context.experimental`, and the
names of `determined.common.util` that scripts import."""

import json
import logging
import pathlib
import random
from collections.abc import Iterator
from typing import Any

import pytest
from support.core_gateway import Server, set_trial_env

import determined as det
from determined.common import util
from determined.core import _validate
from determined.proto import api_pb2, events_pb2
from services.gateway.features.trials.searcher_metrics import adaptive_metrics, missing_metric

SINGLE = {"name": "single", "metric": "validation_loss", "max_length": 10}
ASHA = {"name": "adaptive_asha", "metric": "validation_loss", "time_metric": "batches", "max_time": 100}


@pytest.fixture
def trial_env(gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    storage = {"type": "shared_fs", "host_path": str(tmp_path)}
    set_trial_env(monkeypatch, gateway.port, {"searcher": SINGLE, "checkpoint_storage": storage})
    yield gateway
    det.get_cluster_info.cache_clear()


def test_a_search_that_needs_no_metric_takes_a_validation_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check = _validate.SearcherMetricCheck(SINGLE)
    with caplog.at_level(logging.WARNING, logger="determined.core"):
        check.check({"accuracy": 0.9})
        check.check({"accuracy": 0.95})
        check.check({"validation_loss": 0.1})
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "lacks the searcher metric 'validation_loss'" in warnings[0]
    with pytest.raises(TypeError, match=r"'validation_loss' \(searcher.metric\) must be a number"):
        check.check({"validation_loss": "low"})
    for searcher in ({"name": "random", "metric": "loss"}, {"name": "grid", "metric": "loss"}, {}):
        _validate.SearcherMetricCheck(searcher).check({"accuracy": 1.0})


def test_an_adaptive_search_refuses_a_validation_without_its_metrics() -> None:
    check = _validate.SearcherMetricCheck(ASHA)
    with pytest.raises(ValueError, match="must include the searcher metric 'validation_loss'"):
        check.check({"accuracy": 0.9, "batches": 10})
    with pytest.raises(ValueError, match="must include the time metric 'batches'"):
        check.check({"validation_loss": 0.5})
    check.check({"validation_loss": 0.5, "batches": 10})


def report(group: str, metrics: dict[str, Any], steps: int = 10) -> events_pb2.MetricReport:
    return events_pb2.MetricReport(group=group, steps_completed=steps, metrics_json=json.dumps(metrics))


def test_the_gateway_refuses_what_an_adaptive_search_cannot_use() -> None:
    assert adaptive_metrics(SINGLE) == ()
    assert adaptive_metrics(ASHA) == ("validation_loss", "batches")
    assert adaptive_metrics({"name": "async_halving", "metric": "loss", "time_metric": None}) == ("loss",)
    required = adaptive_metrics(ASHA)
    good = [report("training", {"loss": 1}), report("validation", {"validation_loss": 0.5, "batches": 10})]
    assert missing_metric(good, required) is None
    assert missing_metric([report("validation", {"accuracy": 1})], ()) is None
    refusal = missing_metric([*good, report("validation", {"validation_loss": 0.4}, steps=20)], required)
    assert refusal == (
        "the validation at steps_completed=20 lacks 'batches', which the experiment's adaptive search"
        " decides from (searcher.metric / searcher.time_metric)"
    )


def test_a_trial_reports_a_validation_without_the_metric_of_its_single_search(trial_env: Server) -> None:
    with det.core.init() as core_context:
        core_context.train.report_validation_metrics(10, {"accuracy": 0.9})
    assert [(g, s, m) for g, s, m in trial_env.gateway.reports()] == [("validation", 10, {"accuracy": 0.9})]


def test_start_and_close_instead_of_with(trial_env: Server) -> None:
    core_context = det.core.init()
    core_context.start()
    core_context.start()  # a second start changes nothing
    core_context.train.report_training_metrics(5, {"loss": 1.0})
    core_context.experimental.report_task_using_checkpoint(api_pb2.Checkpoint(uuid="c-1"))
    core_context.close(None, None, None)
    assert [(g, s) for g, s, _ in trial_env.gateway.reports()] == [("training", 5)]
    assert trial_env.gateway.checkpoint_uses == [(7, "c-1")]


def test_off_cluster_experimental_calls_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="determined.core"), det.core.init() as core_context:
        core_context.experimental.report_task_using_checkpoint(api_pb2.Checkpoint(uuid="c-9"))
    assert "report_task_using_checkpoint(c-9)" in caplog.text


def test_the_util_names_scripts_import() -> None:
    assert (util._LEGACY_TRAINING, util._LEGACY_VALIDATION, util._INFERENCE) == (
        "training",
        "validation",
        "inference",
    )
    assert list(util.chunks("ABCDEFG", 3)) == ["ABC", "DEF", "G"]
    assert (util.sizeof_fmt(1536), util.sizeof_fmt(3 * 2**30)) == ("1.5KB", "3.0GB")
    assert util.strtobool("Yes") and not util.strtobool("off")
    with pytest.raises(ValueError, match="not a truth value"):
        util.strtobool("maybe")
    assert util.yaml_safe_load(util.yaml_safe_dump({"b": 1, "a": [2]})) == {"b": 1, "a": [2]}
    assert util.is_protobuf_timestamp("2026-11-22T03:00:00.5Z")
    assert not util.is_protobuf_timestamp("2026-11-22 03:00:00")
    parsed = util.parse_protobuf_timestamp("2026-11-22T03:00:00.123456789Z")
    assert (parsed.year, parsed.microsecond, parsed.utcoffset() is not None) == (2026, 123456, True)
    assert util.wait_for(lambda: (True, 42), timeout=1) == 42
    with pytest.raises(TimeoutError):
        util.wait_for(lambda: (False, None), timeout=0, interval=0)

    @util.preserve_random_state
    def draw() -> float:
        return random.random()

    random.seed(1)
    draw()
    after = random.random()
    random.seed(1)
    assert random.random() == after

    @util.deprecated("use g")
    def f() -> int:
        return 1

    with pytest.warns(
        DeprecationWarning, match="f is deprecated and will be removed in a future version. use g."
    ):
        assert f() == 1
