"""What trial processes call (core_context's metrics, checkpoints, searcher,
preemption and metadata), which only the gRPC servicer serves.

Fencing: a trial process reports only through its trial's current, open
allocation (the one its token names). A process left over from an earlier run
(its allocation exited, was canceled, or a newer run was requested) is
refused with FAILED_PRECONDITION, so nothing it says mixes with the run that
replaced it. Refusals are final and remembered; an accepted report costs one
indexed lookup. A detached run's script (core_v2) reports with its user's login
instead, for its own trial only (features/experiments/unmanaged.py).
"""

import asyncio
import contextlib
import time

from determined.proto import api_pb2
from services.common.envelope import aggregate
from services.gateway.auth import (
    Principal,
    TrialPrincipal,
    UserPrincipal,
    current_principal,
    require_allocation,
    require_trial,
)
from services.gateway.errors import FailedPreconditionError
from services.gateway.features.checkpoints.commands import checkpoint_reported
from services.gateway.features.experiments.unmanaged import DetachedRuns
from services.gateway.features.parts import FeatureService, Parts
from services.gateway.features.trials import commands
from services.gateway.features.trials.queries import AllocationView
from services.gateway.features.trials.searcher_metrics import AdaptiveMetricCheck

# The longest a WatchAllocation call waits before answering unchanged.
MAX_WATCH_S = 60.0


class Reports(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        # Allocation id -> why its reports are refused: final, so kept forever.
        self._refused: dict[str, str] = {}
        self.detached = DetachedRuns(parts)
        self._adaptive_metrics = AdaptiveMetricCheck(parts.queries)

    async def report_metrics(self, request: api_pb2.ReportMetricsRequest) -> api_pb2.ReportMetricsResponse:
        """Appends the batch's events (a retried batch stores none twice: message ids). A
        batch with an event too large for the event log is refused whole (INVALID_ARGUMENT,
        naming the limit) before any is appended, so that the harness can split it and send
        its parts under ids of their own without storing a report twice."""
        principal, allocation = await self._reporting(request.trial_id)
        await self._adaptive_metrics.check(request, allocation.experiment_id)
        appends = commands.metrics_reported(request, allocation.experiment_id)
        commands.check_event_sizes(appends, self.store.nc.max_payload, f"metrics batch {request.batch_seq}")
        for append in appends:
            await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportMetricsResponse()

    async def report_progress(self, request: api_pb2.ReportProgressRequest) -> api_pb2.ReportProgressResponse:
        principal, allocation = await self._reporting(request.trial_id)
        await self.store.append(
            commands.progress_reported(request, allocation.experiment_id), actor=principal.actor
        )
        return api_pb2.ReportProgressResponse()

    async def report_checkpoint(
        self, request: api_pb2.ReportCheckpointRequest
    ) -> api_pb2.ReportCheckpointResponse:
        principal, allocation = await self._reporting(request.trial_id)
        append = checkpoint_reported(request, allocation.experiment_id, reported_at_ns=time.time_ns())
        commands.check_event_sizes(
            [append], self.store.nc.max_payload, f"the report of checkpoint {request.uuid}"
        )
        await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportCheckpointResponse()

    async def report_status(self, request: api_pb2.ReportStatusRequest) -> api_pb2.ReportStatusResponse:
        principal, allocation = await self._reporting(request.trial_id)
        append = commands.status_reported(request, allocation.experiment_id, allocation.allocation_id)
        await self.store.append(append, actor=principal.actor)
        return api_pb2.ReportStatusResponse()

    async def report_early_exit(
        self, request: api_pb2.ReportEarlyExitRequest
    ) -> api_pb2.ReportEarlyExitResponse:
        """Stored once per trial; a later report is refused (FAILED_PRECONDITION,
        "already reported"), decided on the read models caught up with the log
        (two reports racing each other are stored once by the message id)."""
        principal, allocation = await self._reporting(request.trial_id)
        await self.projector.catch_up()
        reported = await self.queries.trials.early_exit_reason(request.trial_id)
        append = commands.early_exit_reported(request, allocation.experiment_id, reported)
        sequence, _ = await self.store.append(append, actor=principal.actor)
        await self.projector.wait_for(sequence)  # a second report is then refused by this gateway
        return api_pb2.ReportEarlyExitResponse()

    async def set_trial_metadata(
        self, request: api_pb2.SetTrialMetadataRequest
    ) -> api_pb2.SetTrialMetadataResponse:
        """Replaces the trial's metadata; answers once the read models hold it,
        so that GetTrialMetadata (from any process of the trial) reads it back."""
        principal, allocation = await self._reporting(request.trial_id)
        last = await self.store.last_event(aggregate("trial", request.trial_id))
        version = 0 if last is None else last.sequence
        await self.projector.wait_for(version)  # compare with what the trial's events say now
        current = await self.queries.trials.trial_metadata(request.trial_id)
        append = commands.metadata_set(request, allocation.experiment_id, version=version, current=current)
        if append is not None:
            sequence, _ = await self.store.append(append, actor=principal.actor)
            await self.projector.wait_for(sequence)
        return api_pb2.SetTrialMetadataResponse()

    async def get_trial_metadata(
        self, request: api_pb2.GetTrialMetadataRequest
    ) -> api_pb2.GetTrialMetadataResponse:
        await self._reporting(request.trial_id)
        metadata_json = await self.queries.trials.trial_metadata(request.trial_id)
        return api_pb2.GetTrialMetadataResponse(metadata_json=metadata_json or "{}")

    async def acknowledge_stop(
        self, request: api_pb2.AcknowledgeStopRequest
    ) -> api_pb2.AcknowledgeStopResponse:
        principal = require_allocation(request.allocation_id)
        allocation = await self.open_allocation(principal)
        if not allocation.stop_requested and await self.projector.catch_up():
            allocation = await self.open_allocation(principal)
        await self.store.append(commands.stop_acknowledged(allocation), actor=principal.actor)
        return api_pb2.AcknowledgeStopResponse()

    async def watch_allocation(
        self, request: api_pb2.WatchAllocationRequest
    ) -> api_pb2.WatchAllocationResponse:
        """Answers at once when the allocation's stop or the trial's searcher
        length differ from what the caller knows, or the searcher is done with
        the trial; else when the projector stores a change of either, or after
        timeout_s (at most MAX_WATCH_S) with the same answer."""
        principal = require_allocation(request.allocation_id)
        deadline = time.monotonic() + min(max(request.timeout_s, 0.0), MAX_WATCH_S)
        watched = [aggregate("allocation", principal.allocation_id), aggregate("trial", principal.trial_id)]
        with self.projector.watching(watched) as changed:
            allocation = await self.open_allocation(principal)
            while True:
                answer = _watch_answer(allocation)
                known = (answer.stop, answer.searcher_length) == (request.stop, request.searcher_length)
                remaining = deadline - time.monotonic()
                if not known or answer.searcher_stopped or remaining <= 0:
                    return answer
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                changed.clear()
                # The row is gone only while the read models are rebuilt: keep the last one seen.
                allocation = await self.queries.trials.allocation(principal.allocation_id) or allocation

    async def get_best_validation(
        self, request: api_pb2.GetBestValidationRequest
    ) -> api_pb2.GetBestValidationResponse:
        _, allocation = await self._reporting(request.trial_id)
        best = await self.queries.experiments.best_validation(allocation.experiment_id)
        if best is None:
            return api_pb2.GetBestValidationResponse(found=False)
        return api_pb2.GetBestValidationResponse(found=True, metric=best)

    async def _reporting(self, trial_id: int) -> tuple[Principal, AllocationView]:
        """The calling process, which must report for its own trial, and its
        allocation, which must be the trial's current, open one (a user: the
        script of the detached run the trial is)."""
        caller = current_principal()
        if isinstance(caller, UserPrincipal):
            return caller, await self.detached.reporting(caller, trial_id)
        principal = require_trial(trial_id)
        return principal, await self.open_allocation(principal)

    async def open_allocation(self, principal: TrialPrincipal) -> AllocationView:
        """The caller's allocation if it is its trial's current, open one, else
        FailedPreconditionError. A missing or closed-looking row gets one more
        look after the projector caught up (the request may be in flight)."""
        allocation_id = principal.allocation_id
        if allocation_id in self._refused:
            raise FailedPreconditionError(self._refused[allocation_id])
        allocation = await self.queries.trials.allocation(allocation_id)
        if (allocation is None or allocation.refusal() is not None) and await self.projector.catch_up():
            allocation = await self.queries.trials.allocation(allocation_id)
        if allocation is None or allocation.trial_id != principal.trial_id:
            raise FailedPreconditionError(
                f"allocation {allocation_id} of trial {principal.trial_id} is unknown; reports from it are refused"
            )
        refusal = allocation.refusal()
        if refusal is not None:
            self._refused[allocation_id] = refusal
            raise FailedPreconditionError(refusal)
        return allocation


def _watch_answer(allocation: AllocationView) -> api_pb2.WatchAllocationResponse:
    return api_pb2.WatchAllocationResponse(
        stop=allocation.stop_requested,
        reason=allocation.stop_reason or "",
        searcher_length=allocation.searcher_length,
        searcher_stopped=allocation.searcher_stop is not None,
    )
