"""Early exits, the trial's metadata and alerts, on a cluster (against the in-process gateway of
`core_gateway`) and off it."""

import logging
import math
import pathlib
from collections.abc import Iterator

import grpc
import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env

import determined as det
from determined.core import EarlyExitReason


@pytest.fixture
def on_cluster(gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    set_trial_env(monkeypatch, gateway.port, config)
    yield
    det.get_cluster_info.cache_clear()


def test_the_reasons_are_determineds() -> None:
    assert det.core.EarlyExitReason is EarlyExitReason
    assert EarlyExitReason.INVALID_HP.value == "EXITED_REASON_INVALID_HP"
    assert EarlyExitReason.USER_REQUESTED_STOP.value == "EXITED_REASON_USER_REQUESTED_STOP"


def test_an_early_exit_is_sent_by_its_short_name_and_a_second_one_only_warns(
    fake: FakeGateway, on_cluster: None, caplog: pytest.LogCaptureFixture
) -> None:
    with det.core.init() as core_context, caplog.at_level(logging.WARNING, logger="determined.core"):
        core_context.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
        assert "already reported" not in caplog.text
        core_context.train.report_early_exit(EarlyExitReason.INVALID_HP)
        assert "already reported" in caplog.text
        with pytest.raises(ValueError):
            core_context.train.report_early_exit("INVALID_HP")  # type: ignore[arg-type]
        # The enum's value is accepted as Determined accepts it.
        core_context.train.report_early_exit("EXITED_REASON_INVALID_HP")  # type: ignore[arg-type]
    assert fake.early_exits == ["USER_REQUESTED_STOP"]
    assert fake.early_exit_calls == 3


def test_a_retry_that_finds_its_own_report_stored_does_not_warn(
    fake: FakeGateway, on_cluster: None, caplog: pytest.LogCaptureFixture
) -> None:
    fake.lost_replies = 1
    with det.core.init() as core_context, caplog.at_level(logging.WARNING, logger="determined.core"):
        core_context.train.report_early_exit(EarlyExitReason.INVALID_HP)
    assert fake.early_exits == ["INVALID_HP"] and fake.early_exit_calls == 2
    assert "already reported" not in caplog.text


def test_invalid_hp_reports_the_early_exit_and_exits_zero(fake: FakeGateway, on_cluster: None) -> None:
    with pytest.raises(SystemExit) as exited, det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"loss": 1.0})
        raise det.InvalidHP("lr too large")
    assert exited.value.code == 0
    assert fake.early_exits == ["INVALID_HP"]
    assert [s for _, s, _ in fake.reports()] == [1]


def test_invalid_hp_exits_zero_even_when_the_report_is_refused(
    fake: FakeGateway, on_cluster: None, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exited, det.core.init():
        fake.fail_with = grpc.StatusCode.FAILED_PRECONDITION
        raise det.InvalidHP("lr too large")
    assert exited.value.code == 0
    assert "could not report the early exit" in caplog.text


def test_a_refused_early_exit_is_raised(fake: FakeGateway, on_cluster: None) -> None:
    fake.fail_with = grpc.StatusCode.FAILED_PRECONDITION  # e.g. the allocation is closed
    with det.core.init() as core_context, pytest.raises(grpc.RpcError):
        core_context.train.report_early_exit(EarlyExitReason.INVALID_HP)


def test_metadata_is_set_whole_and_read_back(fake: FakeGateway, on_cluster: None) -> None:
    with det.core.init() as core_context:
        assert core_context.train.get_metadata() == {}
        core_context.train.set_metadata({"phase": "train", "nested": {"lr": [0.1, 0.01]}})
        assert core_context.train.get_metadata() == {"phase": "train", "nested": {"lr": [0.1, 0.01]}}
        core_context.train.set_metadata({"phase": "eval"})
        assert core_context.train.get_metadata() == {"phase": "eval"}
    assert fake.metadata_sets == ['{"phase":"train","nested":{"lr":[0.1,0.01]}}', '{"phase":"eval"}']


@pytest.mark.parametrize("metadata", [["a"], "text", None, {"x": object()}, {"x": math.nan}, {"x": {1, 2}}])
def test_metadata_must_be_a_dict_of_json_values(
    fake: FakeGateway, on_cluster: None, metadata: object
) -> None:
    with det.core.init() as core_context:
        with pytest.raises(TypeError, match="metadata must be a dict"):
            core_context.train.set_metadata(metadata)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            det.core.DummyTrainContext().set_metadata(metadata)  # type: ignore[arg-type]
    assert fake.metadata_sets == []


def test_off_cluster_early_exits_and_metadata_are_logged(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="determined.core"):
        with det.core.init(checkpoint_storage=str(tmp_path)) as core_context:
            core_context.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
            core_context.train.set_metadata({"a": 1})
            assert core_context.train.get_metadata() == {}
        with pytest.raises(SystemExit), det.core.init(checkpoint_storage=str(tmp_path)):
            raise det.InvalidHP()
    assert "report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)" in caplog.text
    assert 'set_metadata({"a":1})' in caplog.text
    assert "report_early_exit(EarlyExitReason.INVALID_HP)" in caplog.text


@pytest.mark.parametrize(
    ("level", "logged"),
    [("debug", logging.DEBUG), ("info", logging.INFO), ("warn", logging.WARNING), ("error", logging.ERROR)],
)
def test_an_alert_is_logged_at_its_level(
    fake: FakeGateway, on_cluster: None, caplog: pytest.LogCaptureFixture, level: str, logged: int
) -> None:
    with caplog.at_level(logging.DEBUG, logger="determined.core"), det.core.init() as core_context:
        core_context.alert(description="loss diverged", level=level)
        core_context.alert(title="done")
    alerts = [(r.levelno, r.getMessage()) for r in caplog.records if r.getMessage().startswith("alert:")]
    assert alerts == [(logged, "alert: Alert from trial 7: loss diverged"), (logging.INFO, "alert: done")]


def test_alert_levels_are_checked_and_off_cluster_alerts_are_logged(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="determined.core"),
        det.core.init(checkpoint_storage=str(tmp_path)) as core_context,
    ):
        core_context.alert("t", "d", level="error")
        with pytest.raises(ValueError, match="level must be one of"):
            core_context.alert(level="critical")
    assert [(r.levelno, r.getMessage()) for r in caplog.records if "alert:" in r.getMessage()] == [
        (logging.ERROR, "alert: t: d")
    ]
