"""`core_context.preempt`: whether the cluster wants this trial to stop and resume later.

A watcher holds the cluster's answer; the context asks it in the chosen PreemptMode.
Preemption signals do not reach trials yet, so the watcher is never signalled; the
gateway call that will feed it arrives with preemption, and off-cluster it stays silent.
"""

import enum
import logging
import threading

from determined.core._distributed import DistributedContext

logger = logging.getLogger("determined.core")


class PreemptMode(enum.Enum):
    WorkersAskChief = "WORKERS_ASK_CHIEF"
    ChiefOnly = "CHIEF_ONLY"
    WorkersAskMaster = "WORKERS_ASK_MASTER"


class PreemptionWatcher:
    """The latest preemption signal for this allocation, and its acknowledgement."""

    def __init__(self) -> None:
        self._signal = threading.Event()
        self._acknowledged = threading.Event()

    def signal(self) -> None:
        self._signal.set()

    def is_signalled(self) -> bool:
        return self._signal.is_set()

    def acknowledge(self) -> None:
        self._acknowledged.set()

    def is_acknowledged(self) -> bool:
        return self._acknowledged.is_set()


class PreemptContext:
    def __init__(
        self,
        watcher: PreemptionWatcher,
        distributed: DistributedContext,
        mode: PreemptMode = PreemptMode.WorkersAskChief,
    ) -> None:
        if not isinstance(mode, PreemptMode):
            raise TypeError(f"preempt_mode must be a PreemptMode, got {type(mode).__name__}")
        self._watcher = watcher
        self._distributed = distributed
        self._mode = mode

    def should_preempt(self, auto_ack: bool = True) -> bool:
        """True once the trial should save its state and exit 0 to be resumed later.

        In WorkersAskChief mode every worker must call this in lockstep: the chief's answer
        is broadcast. In ChiefOnly mode only the chief may call it.
        """
        is_chief = self._distributed.rank == 0
        if self._mode is PreemptMode.ChiefOnly and not is_chief:
            raise RuntimeError("should_preempt() may only be called by the chief in PreemptMode.ChiefOnly")
        if self._mode is PreemptMode.WorkersAskChief:
            preempt = self._distributed.broadcast(self._watcher.is_signalled() if is_chief else None)
        else:
            preempt = self._watcher.is_signalled()
        if preempt and auto_ack and is_chief:
            self.acknowledge_preemption_signal()
        return bool(preempt)

    def acknowledge_preemption_signal(self) -> None:
        """Tell the cluster the trial will exit to be resumed (an exit 0 then means preempted)."""
        if not self._watcher.is_acknowledged():
            logger.info("preemption acknowledged")
        self._watcher.acknowledge()


class DummyPreemptContext(PreemptContext):
    """Off-cluster: never preempted."""

    def __init__(
        self, distributed: DistributedContext, mode: PreemptMode = PreemptMode.WorkersAskChief
    ) -> None:
        super().__init__(PreemptionWatcher(), distributed, mode)
