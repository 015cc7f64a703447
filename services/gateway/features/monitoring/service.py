"""The cluster's metrics in Prometheus's text format (GET /metrics): the
gateway's own registry, read at scrape time from where each value lives.

A scrape reads its sources at once, each within SOURCE_TIMEOUT_S: the event
log (its last sequence, the projector's position), nats-server's consumer
list (each service's and agent's lag: consumers.py), the read models
(trials, runs, tasks and agents by state: queries.py) and the job queue the
scheduler publishes. A source that does not answer leaves its families out
and shows `det_metrics_source_up{source} 0`. Scrapes run one at a time. What
the projector observes (events by type, trials' start phases: observed.py)
is kept in memory between scrapes.
"""

import asyncio
from collections.abc import Awaitable, Iterator
from typing import TypeVar, cast

import nats.errors
from prometheus_client import CollectorRegistry, Histogram, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from determined.proto import api_pb2
from services.common.connection import NatsUnavailableError
from services.common.job_queue import PublishedQueue
from services.gateway.errors import ReadModelsUnavailableError
from services.gateway.features.jobs.queue import JobQueue
from services.gateway.features.monitoring import families
from services.gateway.features.monitoring.consumers import Consumer, consumers_of, following, lags
from services.gateway.features.monitoring.observed import PHASES, EventTypes, StartPhases
from services.gateway.features.monitoring.queries import Counts
from services.gateway.features.parts import FeatureService, Parts

# How long a scrape waits for one source.
SOURCE_TIMEOUT_S = 5.0
# Trials' start phases take from milliseconds (a free slot, a warm agent) to hours (a queue).
PHASE_BUCKETS_S = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 86400)
T = TypeVar("T")
# What a source that cannot be read raises.
_UNAVAILABLE = (TimeoutError, NatsUnavailableError, ReadModelsUnavailableError, nats.errors.Error)


class _Scraped(Collector):
    """The families of the scrape in progress (set just before the registry is read)."""

    def __init__(self) -> None:
        self.families: list[Metric] = []

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class Monitoring(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._job_queue = JobQueue(parts.store)
        self._lock = asyncio.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self._scraped = _Scraped()
        self.registry.register(self._scraped)
        phases = Histogram(
            "det_trial_start_phase_seconds",
            "How long each phase of a trial run's start took, as this gateway's projector read its events:"
            " requested_to_assigned (queued), assigned_to_started (the agent launching it),"
            " started_to_first_report (until its first metrics or checkpoint).",
            ["phase"],
            buckets=PHASE_BUCKETS_S,
            registry=self.registry,
        )
        for phase in PHASES:
            phases.labels(phase)
        self.event_types = EventTypes()
        self.start_phases = StartPhases(lambda phase, seconds: phases.labels(phase).observe(seconds))
        parts.projector.observers += [self.event_types.observe, self.start_phases.observe]

    async def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """Every metric, and its media type: Prometheus's text format, or
        OpenMetrics when `accept` (the request's Accept) asks for it. The
        caller checked who asks."""
        async with self._lock:
            log, consumers, read_models, queue = await asyncio.gather(
                _within_timeout(self._log()),
                _within_timeout(self._consumers()),
                _within_timeout(self._read_models()),
                _within_timeout(self._queue()),
            )
            scraped = families.gateway_families(self.event_types.by_type(), self.store.skips.count)
            behind: dict[str, int] = {}
            if log is not None:
                log_last, applied = log
                scraped += families.log_families(log_last, applied)
                behind["projector"] = max(0, log_last - applied)
            if consumers is not None:
                behind |= lags(consumers)
            if behind:
                scraped += families.lag_families(behind, following(consumers or []))
            if read_models is not None:
                scraped += families.count_families(read_models[0]) + families.agent_families(read_models[1])
            if queue is not None:
                scraped += families.queue_families(*queue)
            up = {"event_log": log, "consumers": consumers, "read_models": read_models, "job_queue": queue}
            self._scraped.families = scraped + families.source_families(
                {source: answer is not None for source, answer in up.items()}
            )
            encode, media_type = choose_encoder(accept)
            return encode(self.registry), media_type

    async def _log(self) -> tuple[int, int]:
        """The log's last sequence and the projector's position."""
        await self.projector.look_at_log()
        progress = self.projector.progress()
        return cast(int, progress["log_last"]), cast(int, progress["applied"])

    async def _consumers(self) -> list[Consumer]:
        return await self.store.connection.call(lambda: consumers_of(self.store.js, self.store.events_stream))

    async def _read_models(self) -> tuple[Counts, list[api_pb2.Agent]]:
        return await self.queries.monitoring.counts(), await self.queries.agents.agents()

    async def _queue(self) -> tuple[PublishedQueue, list[str]]:
        return await self._job_queue.published(), await self.queries.agents.resource_pools()


async def _within_timeout(reading: Awaitable[T]) -> T | None:
    """A source's answer; None when it cannot be read now."""
    try:
        async with asyncio.timeout(SOURCE_TIMEOUT_S):
            return await reading
    except _UNAVAILABLE:
        return None
