"""Snapshots of a decider's state, so that a service restarted on a long log
replays what came after its last snapshot instead of the whole log.

A snapshot holds a core's state (pickled, compressed) and the stream sequence
it is the fold of: every event of the core's kinds up to that sequence and
nothing after. The Shell (decider.py) writes one every SNAPSHOT_EVERY events
it folds and once it has caught up, each time at a moment when all its own
appends have come back through the log (so that the state is exactly that
fold), and starts from the newest: it replays from the sequence after it.

Snapshots are values beside the event log (EventLog.put_value; on NATS the
JetStream key-value bucket `snapshots` of the namespace), one key per service
and core. One is good only for the code that
wrote it: its version is a hash of the source of the service's package
(services/<service>), of services/common, of the experiment config model
and of the event schema (and of Python's version, for pickle), so a changed
core ignores an old snapshot and replays the log from sequence 1 (and writes
a new one). A snapshot that cannot be read is ignored the same way; one over
nats-server's max_payload is not written (the next start replays from the
older one).
"""

import functools
import hashlib
import json
import pickle
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

import determined.common.expconf
import services
from determined.proto import events_pb2
from services.common.eventlog import SNAPSHOTS_BUCKET, EventLog

# Folded events between two snapshots: what a restart replays at most, on top
# of what came after the last one.
SNAPSHOT_EVERY = 10_000

log = structlog.get_logger()

# What reading a damaged snapshot raises (json, zlib, pickle).
_UNREADABLE = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    ImportError,
    EOFError,
    pickle.UnpicklingError,
    zlib.error,
)


@dataclass(frozen=True)
class Snapshot:
    state: Any
    # The stream sequence the state is the fold of (every event of the core's kinds up to it).
    sequence: int


@functools.cache
def code_version(service: str) -> str:
    """A hash of everything a service's cores' states and decisions come
    from: its package, services/common, the config model and the events."""
    digest = hashlib.sha256(sys.version.encode())
    digest.update(events_pb2.DESCRIPTOR.serialized_pb)
    services_root = Path(services.__file__ or "").parent
    roots = [
        services_root / "common",
        services_root / service,
        Path(determined.common.expconf.__file__ or "").parent,
    ]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:32]


class Snapshots:
    """The snapshots of one service's cores."""

    def __init__(self, store: EventLog, service: str, version: str | None = None) -> None:
        self.store = store
        self.service = service
        self.version = version or code_version(service)

    def key(self, core: str) -> str:
        return f"{self.service}.{core}"

    async def load(self, core: str) -> Snapshot | None:
        """The newest snapshot of `core` written by this code; None when there
        is none (or only one of other code, or one that cannot be read)."""
        value = await self.store.get_value(SNAPSHOTS_BUCKET, self.key(core))
        if value is None:
            return None
        header, _, body = value.partition(b"\n")
        try:
            meta = json.loads(header)
            if meta.get("version") != self.version:
                log.info("snapshot_ignored", core=core, reason="written by other code; replaying the log")
                return None
            return Snapshot(pickle.loads(zlib.decompress(body)), int(meta["sequence"]))
        except _UNREADABLE as error:  # a snapshot is only a shortcut: any doubt means replaying
            log.warning(
                "snapshot_ignored",
                core=core,
                reason=f"unreadable ({type(error).__name__}); replaying the log",
            )
            return None

    async def save(self, core: str, state: Any, sequence: int) -> None:
        try:
            pickled = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            log.warning("snapshot_skipped", core=core, reason=f"the state cannot be pickled: {error}")
            return
        header = json.dumps({"version": self.version, "sequence": sequence}).encode()
        value = header + b"\n" + zlib.compress(pickled, 1)
        if len(value) > self.store.max_value_bytes:
            log.warning("snapshot_skipped", core=core, bytes=len(value), limit=self.store.max_value_bytes)
            return
        await self.store.put_value(SNAPSHOTS_BUCKET, self.key(core), value)
        log.debug("snapshot_saved", core=core, sequence=sequence, bytes=len(value))
