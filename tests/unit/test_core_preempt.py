"""should_preempt() on a cluster: a watcher long-polls WatchAllocation on a real in-process
grpc server (`core_gateway`) and the context answers from what it holds."""

import logging
import pathlib
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from support.core_gateway import ALLOCATION_ID, TOKEN, FakeGateway, Server, set_trial_env, wait_for

import determined as det
from determined._client import TrialClient
from determined.core._preempt import PreemptionWatcher


@pytest.fixture
def on_cluster(gateway: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    set_trial_env(
        monkeypatch,
        gateway.port,
        {"checkpoint_storage": {"type": "directory", "container_path": str(tmp_path)}},
    )
    yield
    det.get_cluster_info.cache_clear()


def watcher_for(gateway: Server, poll_timeout_s: float = 60.0) -> PreemptionWatcher:
    client = TrialClient(f"127.0.0.1:{gateway.port}", TOKEN)
    return PreemptionWatcher(client, ALLOCATION_ID, poll_timeout_s=poll_timeout_s)


def test_should_preempt_turns_true_at_once_when_the_cluster_asks(fake: FakeGateway, on_cluster: None) -> None:
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        for _ in range(100):
            core_context.preempt.should_preempt()
        assert len(fake.watches) <= 2  # the first answer, then one long poll: no call per question
        asked = time.monotonic()
        fake.update(stop=True, reason="experiment paused")
        wait_for(core_context.preempt.should_preempt, timeout=5)
        assert time.monotonic() - asked < 1.0
    first, second = fake.watches[:2]
    assert (first.allocation_id, first.timeout_s, first.stop) == (ALLOCATION_ID, 0.0, False)
    assert (second.timeout_s, second.stop) == (60.0, False)
    assert fake.tokens == {TOKEN}


def test_the_stop_is_acknowledged_once_and_only_when_asked_to(fake: FakeGateway, on_cluster: None) -> None:
    fake.update(stop=True, reason="preempted")
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt(auto_ack=False) is True
        assert fake.acks == []
        assert core_context.preempt.should_preempt() is True
        assert core_context.preempt.should_preempt() is True
        core_context.preempt.acknowledge_preemption_signal()
    assert fake.acks == [ALLOCATION_ID]


def test_a_manual_acknowledgement_without_a_stop_sends_nothing(
    fake: FakeGateway, on_cluster: None, caplog: pytest.LogCaptureFixture
) -> None:
    with det.core.init() as core_context, caplog.at_level(logging.WARNING, logger="determined.core"):
        core_context.preempt.acknowledge_preemption_signal()
    assert fake.acks == []
    assert "did not ask this trial to stop" in caplog.text


def test_a_closed_allocation_reads_as_a_stop_with_nothing_to_acknowledge(
    fake: FakeGateway, on_cluster: None
) -> None:
    fake.update(closed=True)
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is True
    assert fake.acks == []
    assert len(fake.watches) == 1  # refused for good: not asked again


def test_an_allocation_closed_while_watched_stops_the_trial(fake: FakeGateway, on_cluster: None) -> None:
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        fake.update(closed=True)
        wait_for(core_context.preempt.should_preempt, timeout=5)


def test_the_searcher_stopping_the_trial_preempts_it_without_acknowledgement(
    fake: FakeGateway, on_cluster: None
) -> None:
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        fake.update(searcher_stopped=True)
        wait_for(core_context.preempt.should_preempt, timeout=5)
    assert fake.acks == []  # it ends completed whatever it acknowledges


def test_an_unreachable_gateway_is_asked_again(fake: FakeGateway, on_cluster: None) -> None:
    fake.unavailable_watches = 3
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False  # waits for the first answer
        fake.update(stop=True)
        wait_for(core_context.preempt.should_preempt, timeout=5)
    assert fake.unavailable_watches == 0


def test_a_gateway_restart_does_not_lose_the_stop(gateway: Server, on_cluster: None) -> None:
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        gateway.stop()
        time.sleep(0.2)
        gateway.gateway.update(stop=True)
        gateway.start()
        wait_for(core_context.preempt.should_preempt, timeout=10)


def test_closing_the_context_ends_a_long_poll_at_once(gateway: Server, on_cluster: None) -> None:
    with det.core.init() as core_context:
        core_context.preempt.should_preempt()
        wait_for(lambda: len(gateway.gateway.watches) == 2)  # the long poll is in flight
        started = time.monotonic()
    assert time.monotonic() - started < 2.0


def test_the_watcher_holds_the_searcher_length(gateway: Server) -> None:
    watcher = watcher_for(gateway, poll_timeout_s=0.2)
    gateway.gateway.update(searcher_length=58)
    watcher.start()
    try:
        assert watcher.state().searcher_length == 58
        gateway.gateway.update(searcher_length=234)
        state = watcher.wait_for(lambda state: state.searcher_length == 234, timeout_s=5)
        assert (state.searcher_length, state.stop) == (234, False)
        assert all(w.timeout_s == 0.2 for w in gateway.gateway.watches[1:])
    finally:
        watcher.close()
    assert not watcher.watching


def test_asking_before_the_context_is_entered_is_explained(on_cluster: None) -> None:
    core_context = det.core.init()
    with pytest.raises(RuntimeError, match="with det.core.init"):
        core_context.preempt.should_preempt()
    core_context.close()


@pytest.mark.parametrize(
    ("mode", "watched"),
    [(det.core.PreemptMode.WorkersAskChief, False), (det.core.PreemptMode.WorkersAskMaster, True)],
)
def test_workers_watch_only_when_they_ask_the_master(
    on_cluster: None, mode: det.core.PreemptMode, watched: bool
) -> None:
    worker = det.core.DistributedContext(
        rank=1, size=2, local_rank=1, local_size=2, cross_rank=0, cross_size=1
    )
    core_context = det.core.init(distributed=worker, preempt_mode=mode)
    try:
        assert (core_context._watcher is not None) is watched
    finally:
        core_context.close()


def test_a_stop_withdrawn_before_the_trial_asks_is_no_stop(fake: FakeGateway, on_cluster: None) -> None:
    """A pause quickly followed by an activation: the trial trains on."""
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        watcher = core_context._watcher
        assert watcher is not None
        fake.update(stop=True, reason="experiment paused")
        assert watcher.wait_for(lambda state: state.stop, timeout_s=10).stop
        fake.update(stop=False, reason="")
        assert not watcher.wait_for(lambda state: not state.stop, timeout_s=10).stop
        assert core_context.preempt.should_preempt() is False
        fake.update(stop=True, reason="experiment paused")  # paused again: it stops this time
        assert watcher.wait_for(lambda state: state.stop, timeout_s=10).stop
        assert core_context.preempt.should_preempt() is True
    assert fake.acks == [ALLOCATION_ID]


class WithdrawingGateway(FakeGateway):
    """Withdraws the stop as the trial acknowledges it (and then changes the
    allocation by `after_withdrawal`): the acknowledgement arrives after the
    withdrawal and is refused, as the gateway refuses it."""

    def __init__(self, after_withdrawal: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.after_withdrawal = after_withdrawal or {}

    def AcknowledgeStop(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.update(stop=False, reason="", **self.after_withdrawal)
        return super().AcknowledgeStop(request, context)


def test_a_stop_withdrawn_as_the_chief_acknowledges_it_is_not_acted_on(
    gateway: Server, on_cluster: None
) -> None:
    gateway.stop()
    gateway.gateway = withdrawing = WithdrawingGateway()
    gateway.start()
    with det.core.init() as core_context:
        assert core_context.preempt.should_preempt() is False
        watcher = core_context._watcher
        assert watcher is not None
        withdrawing.update(stop=True, reason="experiment paused")
        assert watcher.wait_for(lambda state: state.stop, timeout_s=10).stop
        assert core_context.preempt.should_preempt() is False  # its acknowledgement was refused
        assert watcher.watching  # and the cluster is still watched
    assert withdrawing.acks == []
