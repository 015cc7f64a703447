"""core_context.searcher.operations() on a cluster, against a real in-process grpc server
(`core_gateway`) that plays the searcher: seed-era ASHA configs get one operation per rung,
every other searcher one operation of max_length."""

import logging
import pathlib
import re
import threading
from typing import Any

import pytest
from support.core_gateway import ALLOCATION_ID, TOKEN, FakeGateway, Server, set_trial_env
from test_core_preempt import WithdrawingGateway

import determined as det
from determined._client import TrialClient
from determined.core import SearcherMode
from determined.core._preempt import PreemptionWatcher
from determined.core._searcher import RungSearcherContext

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ASHA = {
    "name": "adaptive_asha",
    "metric": "validation_loss",
    "max_trials": 16,
    "max_length": {"batches": 937},
}


def on_cluster(
    monkeypatch: pytest.MonkeyPatch,
    gateway: Server,
    tmp_path: pathlib.Path,
    searcher: dict[str, Any],
    **env: str,
) -> None:
    storage = {"type": "directory", "container_path": str(tmp_path)}
    set_trial_env(monkeypatch, gateway.port, {"searcher": searcher, "checkpoint_storage": storage}, **env)


def train_by_operations(core_context: det.core.Context, **operations: Any) -> list[int]:
    """What a seed-era script does: train to each op's length, validate, complete it."""
    lengths = []
    for op in core_context.searcher.operations(**operations):
        lengths.append(op.length)
        op.report_progress(op.length)
        core_context.train.report_validation_metrics(op.length, {"validation_loss": 1.0 / op.length})
        op.report_completed(1.0 / op.length)
    return lengths


def test_asha_gives_one_operation_per_rung_until_the_searcher_stops_the_trial(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, tmp_path, ASHA, DET_SEARCHER_LENGTH="58")
    fake.update(searcher_length=58)
    fake.decisions = {58: {"searcher_length": 234}, 234: {"searcher_stopped": True, "stop": True}}
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == [58, 234]
        assert core_context.preempt.should_preempt() is True
    assert [(group, steps) for group, steps, _ in fake.reports()] == [("validation", 58), ("validation", 234)]
    assert fake.progress == [pytest.approx(58 / 937), pytest.approx(234 / 937)]
    assert fake.acks == []


def test_a_resumed_trial_starts_from_its_current_rung(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, tmp_path, ASHA, DET_SEARCHER_LENGTH="234", DET_STEPS_COMPLETED="58")
    fake.update(searcher_length=234)
    fake.decisions = {234: {"searcher_length": 937}, 937: {"searcher_stopped": True}}
    with det.core.init() as core_context:
        assert train_by_operations(core_context, searcher_mode=SearcherMode.ChiefOnly) == [234, 937]


def test_without_a_searcher_length_the_first_operation_is_max_length(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, tmp_path, {**ASHA, "name": "async_halving", "num_rungs": 3})
    fake.decisions = {937: {"searcher_stopped": True}}
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == [937]


def test_a_stop_while_waiting_for_the_next_rung_ends_the_operations_and_is_acknowledged(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, tmp_path, ASHA, DET_SEARCHER_LENGTH="58")
    fake.update(searcher_length=58)
    fake.decisions = {58: {"stop": True, "reason": "experiment paused"}}
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == [58]
    assert fake.acks == [ALLOCATION_ID]  # its exit 0 means "resume me later"


def test_a_trial_the_searcher_is_done_with_gets_no_operation(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster(monkeypatch, gateway, tmp_path, ASHA, DET_SEARCHER_LENGTH="58")
    fake.update(searcher_length=58, searcher_stopped=True, stop=True)
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == []


def test_random_gives_one_operation_of_max_length(
    fake: FakeGateway, gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    searcher = {"name": "random", "metric": "validation_loss", "max_trials": 4, "max_length": 100}
    on_cluster(monkeypatch, gateway, tmp_path, searcher, DET_SEARCHER_LENGTH="58")
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == [100]
    assert fake.progress == [1.0]


def test_a_slow_decision_is_logged_and_still_awaited(
    gateway: Server, caplog: pytest.LogCaptureFixture
) -> None:
    fake = gateway.gateway
    fake.update(searcher_length=58)
    watcher = PreemptionWatcher(TrialClient(f"127.0.0.1:{gateway.port}", TOKEN), ALLOCATION_ID)
    flushed = threading.Event()
    searcher = RungSearcherContext(
        {"batches": 937},
        lambda progress: None,
        watcher=watcher,
        flush=flushed.set,
        distributed=det.core.DummyDistributedContext(),
        log_after_s=0.1,
    )
    watcher.start()
    lengths = []
    try:
        with caplog.at_level(logging.INFO, logger="determined.core"):
            for op in searcher.operations():
                lengths.append(op.length)
                threading.Timer(0.35, fake.update, kwargs={"searcher_length": 937}).start()
                op.report_completed(0.5)
                if op.length == 937:
                    fake.update(searcher_stopped=True)
    finally:
        watcher.close()
    assert lengths == [58, 937]
    assert flushed.is_set()
    assert re.search(r"waiting \d+s so far for the searcher to decide on length 58", caplog.text)


def test_a_stop_withdrawn_while_waiting_for_the_next_rung_is_no_stop(
    gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paused and activated again: the acknowledgement is refused, the operations go on."""
    gateway.stop()
    gateway.gateway = fake = WithdrawingGateway(after_withdrawal={"searcher_length": 234})
    gateway.start()
    on_cluster(monkeypatch, gateway, tmp_path, ASHA, DET_SEARCHER_LENGTH="58")
    fake.update(searcher_length=58)
    fake.decisions = {58: {"stop": True, "reason": "experiment paused"}, 234: {"searcher_stopped": True}}
    with det.core.init() as core_context:
        assert train_by_operations(core_context) == [58, 234]
    assert fake.acks == []
