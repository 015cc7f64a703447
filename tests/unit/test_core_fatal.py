"""An uncaught ReportError tells the agent that a restart cannot help: the core context
writes why into DET_FATAL_ERROR_FILE (the agent then fails the trial once, without
restarts) and logs it; the error still ends the script. Against the in-process gateway
of `core_gateway`."""

import logging
import pathlib
from collections.abc import Iterator

import pytest
from support.core_gateway import FakeGateway, Server, set_trial_env

import determined as det
from determined.core._errors import ReportError, ReportTooLargeError

REASON = "the cluster cannot store the trial's reports: ReportError: "


@pytest.fixture
def fatal_file(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pathlib.Path]:
    """The file the agent names in DET_FATAL_ERROR_FILE (it makes it, empty)."""
    path = tmp_path / ".det-fatal-error"
    path.write_text("")
    config = {"checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path)}}
    set_trial_env(monkeypatch, gateway.port, config, DET_FATAL_ERROR_FILE=str(path))
    yield path
    det.get_cluster_info.cache_clear()


def test_an_uncaught_report_error_is_told_to_the_agent_and_logged(
    fatal_file: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.ERROR, logger="determined.core"),
        pytest.raises(ReportTooLargeError) as raised,
        det.core.init() as core_context,
    ):
        core_context.train.report_training_metrics(1, {"blob": "x" * (2 * 2**20)})
    assert fatal_file.read_text() == REASON + str(raised.value)
    assert "the trial fails without restarts" in caplog.text


def test_a_report_dropped_by_the_gateway_and_raised_at_exit_is_told_too(
    fake: FakeGateway, fatal_file: pathlib.Path
) -> None:
    fake.max_batch_bytes = 100 * 1024
    with pytest.raises(ReportError, match="dropped") as raised, det.core.init() as core_context:
        core_context.train.report_training_metrics(1, {"text": "t" * 200 * 1024})
    assert fatal_file.read_text() == REASON + str(raised.value)


def test_a_caught_report_error_or_another_failure_says_nothing(fatal_file: pathlib.Path) -> None:
    with pytest.raises(RuntimeError), det.core.init() as core_context:
        with pytest.raises(ReportTooLargeError):
            core_context.train.report_training_metrics(1, {"blob": "x" * (2 * 2**20)})
        raise RuntimeError("a bug of the script's own: a restart may get past it")
    assert fatal_file.read_text() == ""
