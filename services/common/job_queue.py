"""The job queue as the scheduler publishes it for users (`det job list`):
per pool, its jobs in the order the pool's scheduler serves them, what they
ask for and hold, and why a waiting one waits; with the scheduler's settings
that users see (each pool's scheduler, the default priority).

The scheduler writes it (services/scheduler/publishing.py) whenever its
state moves on, as the value `queue` of the event log's bucket `job_queue`
(on NATS the JetStream key-value bucket `job_queue` of the namespace); the
gateway reads it (services/gateway/features/jobs/queue.py) and adds what its read models
know of each job (name, owner). Only the scheduler may write it
(deploy/local/credentials.py). One over the log's largest value is not
written (logged): the gateway then shows the one before.

The entry is compact JSON: {"version": 1, "sequence", "kinds",
"default_type", "pool_types", "default_priority", "jobs": [{JobView's
fields}]}. `sequence` is the stream sequence the scheduler's state covered
(every event of `kinds` up to it folded), so a reader can tell whether the
entry already answers an event it knows of. A reader takes an
entry of another version, or one it cannot read, as none published yet.
"""

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from services.common.eventlog import EventLog
from services.common.scheduling import DEFAULT_PRIORITY, FAIR_SHARE

VERSION = 1
BUCKET = "job_queue"
KEY = "queue"

log = structlog.get_logger()


@dataclass(frozen=True)
class JobView:
    job_id: str
    resource_pool: str
    priority: int
    weight: float
    max_slots: int
    submitted_at_ns: int
    slots_needed: int
    slots_acquired: int
    # "QUEUED" (nothing holds slots) or "SCHEDULED" (something runs).
    state: str
    # From 1, within its pool.
    position: int
    # Why its first waiting request waits; "" when none does.
    waiting_reason: str


@dataclass(frozen=True)
class PublishedQueue:
    # The stream sequence the scheduler's state covers: every event of `kinds` up to it folded.
    sequence: int = 0
    # The subject kinds of the events the scheduler folds.
    kinds: tuple[str, ...] = ()
    # The scheduler of a pool that `pool_types` does not name.
    default_type: str = FAIR_SHARE
    pool_types: dict[str, str] = field(default_factory=dict)
    default_priority: int = DEFAULT_PRIORITY
    jobs: tuple[JobView, ...] = ()

    def scheduler_of(self, pool: str) -> str:
        return self.pool_types.get(pool, self.default_type)


def encoded(queue: PublishedQueue) -> bytes:
    return json.dumps({"version": VERSION, **asdict(queue)}, separators=(",", ":")).encode()


def decoded(data: bytes) -> PublishedQueue | None:
    """The queue an entry holds; None for one of another version or unreadable."""
    try:
        document: dict[str, Any] = json.loads(data)
        if document.pop("version") != VERSION:
            return None
        jobs = tuple(JobView(**job) for job in document.pop("jobs"))
        return PublishedQueue(**dict(document, kinds=tuple(document["kinds"]), jobs=jobs))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


class KvJobQueueBoard:
    """Where the scheduler publishes its queue and the gateway reads it: the
    value `queue` of the event log's bucket `job_queue` (a JetStream
    key-value bucket on NATS, which its writer makes when missing)."""

    def __init__(self, event_log: EventLog) -> None:
        self.event_log = event_log

    async def publish(self, queue: PublishedQueue) -> None:
        value = encoded(queue)
        if len(value) > self.event_log.max_value_bytes:
            log.warning("job_queue_too_large", bytes=len(value), limit=self.event_log.max_value_bytes)
            return
        await self.event_log.put_value(BUCKET, KEY, value)

    async def read(self) -> PublishedQueue | None:
        value = await self.event_log.get_value(BUCKET, KEY)
        return None if value is None else decoded(value)
