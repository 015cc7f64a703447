"""The checkpoint service's side effects: deleting checkpoints' files, and
the TensorBoard files of an experiment being deleted.

`Deleter.on_state` is the Shell's hook: after each fold it queues every
checkpoint of a running deletion (GcState.deleting) that has no outcome yet
and that it has not queued before. Workers delete each one's files with the
storage backend the deletion names (in a thread: the backends block) and
append its outcome themselves: CheckpointDeleted when nothing is left,
else CheckpointPartiallyDeleted with what is left and the storage's error.
The outcome folds back into the state through the log and settles the
checkpoint. The same way, once per delete request of an experiment being
deleted, a worker deletes the experiment's TensorBoard folder
(`tensorboard/experiment/<id>/` in its checkpoint storage) and appends
TensorboardFilesDeleted.

After a restart, the replayed state holds exactly the checkpoints and the
delete requests whose outcome never reached the log, and the first
`on_state` queues those: a deletion that had happened before the crash is
done again (deleting files already gone deletes nothing and fails nothing),
one that had not is done now, and one with an outcome is never done again.
"""

import asyncio
import contextvars
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from google.protobuf.message import Message

from determined.common import storage
from determined.proto import events_pb2
from determined.tensorboard import experiment_storage
from services.checkpoint.state import Deletion, Experiment, GcState, Target
from services.common.cancelling import cancel_and_wait
from services.common.envelope import Append, aggregate
from services.common.eventlog import EventLog

log = structlog.get_logger()

# A storage call that raises is tried this many times, these seconds apart,
# before the checkpoint is recorded PARTIALLY_DELETED (the TensorBoard files
# left) with the error.
ATTEMPTS = 3
RETRY_DELAY_S = 0.5
# After an unexpected failure to append an outcome, wait this long and try again.
APPEND_RETRY_S = 1.0
# Outcomes being appended at once: a worker goes on to its next checkpoint
# without waiting for the log's ack (nats-server syncs each append to disk).
APPENDS_IN_FLIGHT = 256

Builder = Callable[[Mapping[str, Any]], storage.StorageManager]


@dataclass(frozen=True)
class Job:
    deletion: Deletion
    target: Target


@dataclass(frozen=True)
class TensorboardJob:
    """Deleting the TensorBoard files of an experiment being deleted, for its
    `delete_request`th ExperimentDeleteRequested (whose event id and
    correlation id the outcome answers; "" when the state has none)."""

    experiment_id: int
    delete_request: int
    storage_json: str
    event_id: str
    correlation_id: str

    @classmethod
    def of(cls, experiment: Experiment) -> "TensorboardJob":
        return cls(
            experiment.experiment_id,
            experiment.delete_requests,
            experiment.storage_json,
            experiment.delete_event_id,
            experiment.delete_correlation_id,
        )


class Deleter:
    """Deletes the files of requested checkpoints, and the TensorBoard files
    of experiments being deleted, `workers` at a time."""

    def __init__(
        self,
        store: EventLog,
        actor: str,
        *,
        workers: int = 8,
        build: Builder = storage.build,
        retry_delay_s: float = RETRY_DELAY_S,
    ) -> None:
        self.store = store
        self.actor = actor
        self.workers = workers
        self.build = build
        self.retry_delay_s = retry_delay_s
        self.queue: asyncio.Queue[Job | TensorboardJob] = asyncio.Queue()
        # Running deletions whose unsettled checkpoints are queued.
        self.queued: set[tuple[int, int]] = set()
        # (experiment id, delete request) whose TensorBoard files are queued.
        self.tensorboards_queued: set[tuple[int, int]] = set()
        self.tasks: list[asyncio.Task[None]] = []
        self.appending: set[asyncio.Task[None]] = set()
        self.append_slots = asyncio.Semaphore(APPENDS_IN_FLIGHT)
        # One manager per storage section (an S3 client is slow to make); why
        # not, when the section cannot be built.
        self.managers: dict[str, storage.StorageManager | str] = {}
        self.managers_lock = threading.Lock()

    async def on_state(self, state: GcState) -> list[Append]:
        if not self.tasks:
            # In a context of their own: not the log context of the event being folded now.
            self.tasks = [
                asyncio.create_task(self._work(), name=f"gc-worker-{n}", context=contextvars.Context())
                for n in range(self.workers)
            ]
        for key, deletion in state.deleting.items():
            if key not in self.queued:
                self.queued.add(key)
                unsettled = state.unsettled(deletion)
                log.info(
                    "checkpoint_deletion_started",
                    experiment_id=deletion.experiment_id,
                    deletion_id=deletion.deletion_id,
                    checkpoints=len(unsettled),
                    reason=deletion.reason,
                )
                for target in unsettled:
                    self.queue.put_nowait(Job(deletion, target))
        self.queued &= state.deleting.keys()
        self._queue_tensorboards(state)
        return []

    def _queue_tensorboards(self, state: GcState) -> None:
        """Queues, once per delete request, the TensorBoard files of each experiment
        being deleted whose outcome for its request is not in the state."""
        due = {
            (experiment.experiment_id, experiment.delete_requests): experiment
            for experiment_id in state.deletes_due
            if (experiment := state.experiments[experiment_id]).tensorboards_due
        }
        for key in sorted(due.keys() - self.tensorboards_queued):
            log.info("tensorboard_files_deletion_started", experiment_id=key[0], delete_request=key[1])
            self.queue.put_nowait(TensorboardJob.of(due[key]))
        self.tensorboards_queued = set(due)

    async def stop(self) -> None:
        await cancel_and_wait(*self.tasks, *self.appending)
        self.tasks = []

    async def _work(self) -> None:
        while True:
            job = await self.queue.get()
            outcome = await asyncio.to_thread(self._outcome, job)
            await self.append_slots.acquire()
            task = asyncio.create_task(self._append(outcome))
            self.appending.add(task)
            task.add_done_callback(self._appended)

    def _appended(self, task: "asyncio.Task[None]") -> None:
        self.appending.discard(task)
        self.append_slots.release()

    async def _append(self, outcome: Append) -> None:
        while True:
            try:
                await self.store.append(outcome, actor=self.actor)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # the append waits out outages; anything else is a bug to see, and retry
                log.exception("checkpoint_outcome_append_failed", msg_id=outcome.msg_id)
                await asyncio.sleep(APPEND_RETRY_S)

    def _outcome(self, job: Job | TensorboardJob) -> Append:
        """Does the job (blocking), in the log context of what it deletes; returns its outcome."""
        if isinstance(job, Job):
            with structlog.contextvars.bound_contextvars(
                experiment_id=job.deletion.experiment_id, deletion_id=job.deletion.deletion_id
            ):
                return self.delete(job)
        with structlog.contextvars.bound_contextvars(
            experiment_id=job.experiment_id, delete_request=job.delete_request
        ):
            return self.delete_tensorboards(job)

    def delete(self, job: Job) -> Append:
        """Deletes one checkpoint's files (blocking); returns its outcome."""
        deletion, target = job.deletion, job.target
        started = time.monotonic()
        try:
            result = self._delete_files(deletion, target)
        except Exception as error:  # noqa: BLE001 - whatever the storage raised is recorded for the user
            message = _described(error)
            log.warning("checkpoint_delete_failed", uuid=target.uuid, error=message)
            return _partially_deleted(deletion, target, dict(target.resources), message, 0)
        log.debug("checkpoint_files_deleted", uuid=target.uuid, seconds=round(time.monotonic() - started, 3))
        if not result.remaining and not result.errors:
            return _deleted(deletion, target, max(result.bytes_freed, target.bytes))
        freed = max(result.bytes_freed, target.bytes - sum(result.remaining.values()))
        return _partially_deleted(deletion, target, dict(result.remaining), "; ".join(result.errors), freed)

    def _delete_files(self, deletion: Deletion, target: Target) -> storage.DeleteResult:
        manager = self._manager(deletion.storage_json)
        globs = list(deletion.globs) or None
        return self._retried(
            lambda: manager.delete(target.uuid, globs), "checkpoint_delete_retried", uuid=target.uuid
        )

    def delete_tensorboards(self, job: TensorboardJob) -> Append:
        """Deletes the experiment's TensorBoard folder (blocking); returns the outcome."""
        try:
            result = self._delete_tensorboard_files(job)
        except Exception as error:  # noqa: BLE001 - whatever the storage raised is recorded for the user
            message = _described(error)
            log.warning("tensorboard_files_delete_failed", error=message)
            return _tensorboards_deleted(job, storage.DeleteResult(errors=[message]))
        log.info("tensorboard_files_deleted", bytes_freed=result.bytes_freed, left=len(result.remaining))
        return _tensorboards_deleted(job, result)

    def _delete_tensorboard_files(self, job: TensorboardJob) -> storage.DeleteResult:
        if not job.storage_json:
            return storage.DeleteResult()  # no checkpoint storage: no trial of it could write any
        folders = experiment_storage(self._manager(job.storage_json))
        return self._retried(
            lambda: folders.delete(str(job.experiment_id)), "tensorboard_files_delete_retried"
        )

    def _retried(
        self, delete: Callable[[], storage.DeleteResult], event: str, **fields: object
    ) -> storage.DeleteResult:
        """`delete` tried ATTEMPTS times while it raises, each retry logged as
        `event` with `fields`; the last error raised."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return delete()
            except Exception as error:
                if attempt == ATTEMPTS:
                    raise
                log.info(event, attempt=attempt, error=str(error), **fields)
                time.sleep(self.retry_delay_s * attempt)
        raise AssertionError("unreachable")

    def _manager(self, storage_json: str) -> storage.StorageManager:
        with self.managers_lock:
            manager = self.managers.get(storage_json)
            if manager is None:
                try:
                    if not storage_json:
                        raise ValueError("the experiment's config has no checkpoint_storage section")
                    manager = self.build(json.loads(storage_json))
                except (ValueError, TypeError, ImportError, storage.StorageError) as error:
                    manager = f"{type(error).__name__}: {error}"
                self.managers[storage_json] = manager
        if isinstance(manager, str):
            raise storage.StorageError(manager)
        return manager


def _described(error: Exception) -> str:
    """The storage's error as the user reads it."""
    return str(error) if isinstance(error, storage.StorageError) else f"{type(error).__name__}: {error}"


def _deleted(deletion: Deletion, target: Target, bytes_freed: int) -> Append:
    event = events_pb2.CheckpointDeleted(
        uuid=target.uuid,
        experiment_id=deletion.experiment_id,
        trial_id=target.trial_id,
        deletion_id=deletion.deletion_id,
        bytes_freed=bytes_freed,
    )
    return _answering(
        deletion, aggregate("checkpoint", target.uuid), event, f"checkpoint-deleted-{target.uuid}"
    )


def _partially_deleted(
    deletion: Deletion, target: Target, remaining: dict[str, int], error: str, bytes_freed: int
) -> Append:
    event = events_pb2.CheckpointPartiallyDeleted(
        uuid=target.uuid,
        experiment_id=deletion.experiment_id,
        trial_id=target.trial_id,
        deletion_id=deletion.deletion_id,
        remaining=remaining,
        error=error,
        bytes_freed=bytes_freed,
    )
    msg_id = f"checkpoint-partially-deleted-{target.uuid}-{deletion.deletion_id}"
    return _answering(deletion, aggregate("checkpoint", target.uuid), event, msg_id)


def _answering(deletion: Deletion, name: str, event: Message, msg_id: str) -> Append:
    """An outcome caused by the deletion's decision, in the same chain."""
    return Append(name, event, msg_id, causation_id=deletion.event_id, correlation_id=deletion.correlation_id)


def _tensorboards_deleted(job: TensorboardJob, result: storage.DeleteResult) -> Append:
    event = events_pb2.TensorboardFilesDeleted(
        experiment_id=job.experiment_id,
        delete_request=job.delete_request,
        remaining=result.remaining,
        error="; ".join(result.errors),
        bytes_freed=result.bytes_freed,
    )
    return Append(
        aggregate("experiment", job.experiment_id),
        event,
        f"tensorboard-files-deleted-{job.experiment_id}-{job.delete_request}",
        causation_id=job.event_id,
        correlation_id=job.correlation_id,
    )
