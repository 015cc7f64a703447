"""GetWorkload (`det events simulate`): the recorded workload, for admins
only (it shows every user's jobs). It reads the allocation, agent and
experiment events of the whole log (an allocation requested in the window
may have waited behind older ones, and ends after it) and folds them
(workload.py); each pool's scheduler and the default priority are those the
scheduler published (services/gateway/features/jobs/queue.py)."""

import contextlib
from collections.abc import AsyncGenerator
from typing import cast

from determined.proto import api_pb2
from services.common.eventlog import EventLog, StoredEvent
from services.common.job_queue import PublishedQueue
from services.gateway.auth import require_admin
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events.workload import WORKLOAD_KINDS, WorkloadRecorder
from services.gateway.features.jobs.queue import JobQueue
from services.gateway.features.parts import FeatureService, Parts


class Workloads(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._job_queue = JobQueue(parts.store)

    async def get_workload(self, request: api_pb2.GetWorkloadRequest) -> api_pb2.GetWorkloadResponse:
        require_admin("reading the recorded workload")
        if request.since_ns < 0 or request.until_ns < 0:
            raise InvalidArgumentError("since and until must be times (Unix nanoseconds), not negative")
        if request.until_ns and request.until_ns < request.since_ns:
            raise InvalidArgumentError("until is before since")
        return await recorded_workload(self.store, request, await self._job_queue.published())


async def recorded_workload(
    store: EventLog, request: api_pb2.GetWorkloadRequest, queue: PublishedQueue
) -> api_pb2.GetWorkloadResponse:
    """The workload of the request's window, `queue` the scheduler's published settings."""
    recorder = WorkloadRecorder(request.since_ns, request.until_ns, queue.default_priority)
    reading = cast(
        AsyncGenerator[list[StoredEvent], None], store.read_batches(WORKLOAD_KINDS, 1, follow=False)
    )
    async with contextlib.aclosing(reading) as batches:
        async for batch in batches:
            for stored in batch:
                recorder.fold(stored)
    return recorder.response(queue)
