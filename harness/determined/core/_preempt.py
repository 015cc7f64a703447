"""`core_context.preempt`: whether the cluster wants this trial to stop and resume later.

On a cluster a PreemptionWatcher long-polls the gateway's WatchAllocation on a daemon thread
and holds the latest answer, so should_preempt() costs no call and turns true as soon as the
gateway answers the poll (at once on a change). The same answer carries the searcher's length
for the trial and whether the searcher is done with it (see `_searcher`). Off-cluster, and on
workers that get the chief's answer, nothing is watched and no stop ever comes.

A pause's stop is withdrawn when the experiment is activated again before the trial
acknowledged it: the answer turns back to "no stop". So the chief acknowledges a stop before
should_preempt() says so, and a stop whose acknowledgement the gateway refuses because it was
withdrawn meanwhile is no stop: the trial trains on.
"""

import enum
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from determined._client import AllocationState, TrialClient
from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")

# The longest a poll waits for a change (the gateway caps it at 60 s too).
WATCH_TIMEOUT_S = 60.0
_BACKOFF_FIRST_S = 0.05
_BACKOFF_MAX_S = 10.0


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class StopSignal(Protocol):
    """Where a PreemptContext reads the cluster's answer."""

    def state(self) -> AllocationState: ...

    def acknowledge(self) -> bool: ...


class NeverStopped:
    """Off-cluster, and on workers that get the chief's answer: never stopped, no I/O."""

    def state(self) -> AllocationState:
        return AllocationState()

    def acknowledge(self) -> bool:
        """Nothing was asked, so there is nothing to acknowledge."""
        return False


class PreemptionWatcher:
    """The cluster's latest answer for this allocation, kept fresh by a long poll.

    The first poll asks for an answer at once (timeout 0), so the first state() returns the
    cluster's answer rather than a guess; later polls pass what the watcher knows and wait up
    to `poll_timeout_s`, so the gateway answers the moment a decision changes it. Polling ends
    once the trial acknowledged a stop or the searcher is done with the trial (neither is taken
    back; a stop not acknowledged yet may be), or when the gateway refuses the allocation
    (FAILED_PRECONDITION: it is closed, which reads as a stop). An unavailable gateway
    (restarting, or PostgreSQL down) is polled again with back-off for as long as the trial
    runs: a stop decided meanwhile arrives when the outage ends, and the answer known before
    it stands until then.
    """

    def __init__(
        self,
        client: TrialClient,
        allocation_id: str,
        searcher_length: int = 0,
        *,
        poll_timeout_s: float = WATCH_TIMEOUT_S,
    ) -> None:
        self._client = client  # its own connection: closing it cancels the poll in flight
        self._allocation_id = allocation_id
        self._poll_timeout_s = poll_timeout_s
        self._state = AllocationState(searcher_length=searcher_length)
        self._answered = False
        self._ended = False
        self._closed_allocation = False
        self._changed = threading.Condition()
        self._closing = threading.Event()
        self._ack_lock = threading.Lock()
        self._acknowledged = False
        self._failure: str | None = None  # the last error logged, until a poll is answered
        self._thread = threading.Thread(target=self._run, name="determined-preemption", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop polling and release the connection. Safe to call twice."""
        self._closing.set()
        self._client.close()
        if self._thread.ident is not None:
            self._thread.join()

    def state(self) -> AllocationState:
        """The latest answer; before the first one arrives, wait for it."""
        return self.wait_for(lambda state: True)

    def wait_for(
        self, done: Callable[[AllocationState], bool], timeout_s: float | None = None
    ) -> AllocationState:
        """The latest answer once `done` holds for it, `timeout_s` passed or polling ended."""
        if self._thread.ident is None:
            raise RuntimeError("the cluster is not watched yet: use `with det.core.init() as core_context:`")
        with self._changed:
            self._changed.wait_for(lambda: self._ended or (self._answered and done(self._state)), timeout_s)
            return self._state

    @property
    def watching(self) -> bool:
        with self._changed:
            return not self._ended

    def acknowledge(self) -> bool:
        """Tell the gateway (once) that the trial will exit to be resumed: its exit 0 then
        means stopped, not completed. Whether the trial should stop: false when no stop is
        asked, or when the stop was withdrawn before the acknowledgement reached the gateway.
        Nothing is sent when the searcher stopped the trial (it ends completed either way),
        the allocation is closed, or no stop was asked for (the gateway would refuse it)."""
        with self._ack_lock:
            if self._acknowledged:
                return True
            state = self.state()
            if not (state.stop or state.searcher_stopped):
                logger.warning("the cluster did not ask this trial to stop: there is nothing to acknowledge")
                return False
            if not (state.searcher_stopped or self._closed_allocation) and not self._send_acknowledgement():
                return False
            self._acknowledged = True
            return True

    def _send_acknowledgement(self) -> bool:
        """Whether the stop stands: acknowledged, or refused for an allocation that is closed."""
        try:
            self._client.acknowledge_stop(self._allocation_id)
        except Exception as error:
            refusal = self._client.refusal(error)
            if refusal is None:
                raise
            return self._stop_stands_after(refusal)
        logger.info("preemption acknowledged: the trial will exit to be resumed later")
        return True

    def _stop_stands_after(self, refusal: str) -> bool:
        """The gateway refused the acknowledgement: the stop was withdrawn (the watch soon
        answers "no stop", the experiment was activated again), or the allocation closed."""
        state = self.wait_for(lambda state: not state.stop, WATCH_TIMEOUT_S)
        if state.stop:
            logger.warning("the gateway refused the stop acknowledgement: %s", refusal)
            return True
        logger.info("the stop was withdrawn before the trial acknowledged it: training goes on")
        return False

    def _run(self) -> None:
        try:
            self._poll()
        finally:
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def _poll(self) -> None:
        timeout_s = 0.0
        delay = _BACKOFF_FIRST_S
        while not self._closing.is_set() and not self._final():
            try:
                answer = self._client.watch_allocation(self._allocation_id, self._state, timeout_s)
            except Exception as error:  # noqa: BLE001 - classified below; the thread must go on
                if self._closing.is_set():
                    return
                refusal = self._client.refusal(error)
                if refusal is not None:
                    self._allocation_closed(refusal)
                    return
                delay = self._back_off(error, delay)
                continue
            self._record(answer)
            timeout_s, delay, self._failure = self._poll_timeout_s, _BACKOFF_FIRST_S, None

    def _final(self) -> bool:
        return self._answered and (self._acknowledged or self._state.searcher_stopped)

    def _back_off(self, error: Exception, delay: float) -> float:
        """Wait before polling again; the next delay. The client logs an outage once; an
        error that is not transient is logged once until the poll is answered again. Such an
        error may never go away: the current answer stands meanwhile, so nobody waits on a
        first one."""
        if not self._client.is_transient(error):
            description = self._client.describe(error)
            if description != self._failure:
                logger.error(
                    "watching the allocation failed: %s; retrying every %.0f s", description, _BACKOFF_MAX_S
                )
            self._failure = description
            delay = _BACKOFF_MAX_S
            self._record(self._state)
        self._closing.wait(delay)
        return min(delay * 2, _BACKOFF_MAX_S)

    def _allocation_closed(self, refusal: str) -> None:
        logger.warning("the gateway refuses this allocation's calls (%s): the trial should stop", refusal)
        self._closed_allocation = True
        self._record(self._state._replace(stop=True, reason=refusal))

    def _record(self, answer: AllocationState) -> None:
        _log_changes(self._state, answer)
        with self._changed:
            self._state = answer
            self._answered = True
            self._changed.notify_all()


def _log_changes(old: AllocationState, new: AllocationState) -> None:
    if new.stop and not old.stop:
        logger.info("the cluster asked the trial to stop: %s", new.reason or "no reason given")
    if new.searcher_stopped and not old.searcher_stopped:
        logger.info("the searcher is done with the trial")
    if new.searcher_length != old.searcher_length and new.searcher_length:
        logger.info("the searcher's length for the trial is now %d", new.searcher_length)


class PreemptContext:
    def __init__(
        self,
        watcher: StopSignal,
        distributed: DistributedContext,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        if not isinstance(mode, PreemptMode):
            raise TypeError(f"preempt_mode must be a PreemptMode, got {type(mode).__name__}")
        self._watcher = watcher
        self._distributed = distributed
        self._mode = mode

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the trial should save its state and exit 0 to be resumed later (or, when
        the searcher is done with it, to end).

        In WorkersAskChief mode every worker must call this in lockstep: the chief's answer
        is broadcast. In ChiefOnly mode only the chief may call it.
        """
        is_chief = self._distributed.rank == 0
        if self._mode is PreemptMode.ChiefOnly and not is_chief:
            raise RuntimeError("should_preempt() may only be called by the chief in PreemptMode.ChiefOnly")
        if self._mode is PreemptMode.WorkersAskChief:
            return bool(self._distributed.broadcast(self._chief_answer(auto_ack) if is_chief else None))
        return self._chief_answer(auto_ack) if is_chief else self._stopping()

    def acknowledge_preemption_signal(self) -> None:
        """Tell the cluster the trial will exit to be resumed (an exit 0 then means preempted)."""
        self._watcher.acknowledge()

    def _chief_answer(self, auto_ack: bool) -> bool:
        """With `auto_ack` a stop is acknowledged before it is answered: one withdrawn before
        the acknowledgement reached the cluster is no stop."""
        if not self._stopping():
            return False
        return self._watcher.acknowledge() if auto_ack else True

    def _stopping(self) -> bool:
        state = self._watcher.state()
        return state.stop or state.searcher_stopped


class DummyPreemptContext(PreemptContext):
    """Off-cluster: never preempted."""

    def __init__(
        self, distributed: DistributedContext, mode: PreemptMode = PreemptMode.WorkersAskChief
    ) -> None:
        super().__init__(NeverStopped(), distributed, mode)
