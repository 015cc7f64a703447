"""Trial logs: the JetStream stream LOGS, beside the events and not state.

Agents publish each trial's output in batches; the gateway reads them for
`det trial logs`. The stream keeps at most 30 days and 2 GiB in all (the
gateway's DET_LOGS_MAX_BYTES, eventstore.StreamLimits): past either, the
oldest batches are discarded. One batch is at most max_payload; a message id
is remembered for LOGS_DUPLICATE_WINDOW_S.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from determined.proto import events_pb2
from services.common.eventlog import namespaced

if TYPE_CHECKING:
    from services.common.eventstore import EventStore

LOGS_DUPLICATE_WINDOW_S = 120.0


@dataclass(frozen=True)
class StoredLogBatch:
    sequence: int
    batch: events_pb2.LogBatch
    caught_up: bool


class TrialLogs:
    """The log batches of one namespace's trials, on the event store's connection."""

    def __init__(self, store: "EventStore") -> None:
        self._store = store
        self.stream = namespaced("LOGS", store.namespace)

    def subject(self, trial_id: int) -> str:
        return f"{self._store.namespace}.logs.trial.{trial_id}"

    def task_subject(self, task_type: str, task_id: str) -> str:
        """Where a notebook's, TensorBoard's, command's or shell's output goes."""
        return f"{self._store.namespace}.logs.{task_type.lower()}.{task_id}"

    async def publish(self, batch: events_pb2.LogBatch, msg_id: str = "", *, subject: str = "") -> None:
        """Publishes one batch (on its trial's subject unless `subject` says),
        waiting out an outage like an append; with a msg_id, a retry of a
        batch that landed is stored once (within 120 s)."""
        data = batch.SerializeToString()
        connection = self._store.connection
        await connection.call(
            lambda: connection.jetstream().publish(
                subject or self.subject(batch.trial_id),
                data,
                stream=self.stream,
                headers={"Nats-Msg-Id": msg_id} if msg_id else None,
            )
        )

    def read(self, trial_id: int, follow: bool) -> AsyncIterator[StoredLogBatch]:
        """The trial's batches in order (see `read_subject`)."""
        return self.read_subject(self.subject(trial_id), follow)

    async def read_subject(
        self, subject: str, follow: bool, start_sequence: int = 1
    ) -> AsyncIterator[StoredLogBatch]:
        """The batches of one subject (a trial's, a task's) in order, from
        `start_sequence` of the stream; one that is not a log batch (what a
        holder of an agent's password may publish) is skipped and recorded."""
        reading = self._store.reader.read(self.stream, [subject], start_sequence, follow)
        async for sequence, data, caught_up, subject in reading:
            try:
                batch = events_pb2.LogBatch.FromString(data)
            except DecodeError as error:
                self._store.skips.record(sequence, subject, f"not a log batch ({error})", reader="logs")
                continue
            yield StoredLogBatch(sequence, batch, caught_up)
