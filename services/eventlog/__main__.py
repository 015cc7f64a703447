"""Prints the event log as JSON lines, one event per line with its stream
sequence, to audit or debug a cluster (and to record the golden logs under
tests/golden/). It reads JetStream directly: run it where NATS is reachable.

    python -m services.eventlog [--nats-url URL] [--credentials FILE]
                                [--kind experiment --kind trial ...]
                                [--from-sequence N] [--follow]

A local cluster's nats-server lets in its users only: `--credentials` names
its <data dir>/credentials.json, and the tool logs in as `operator`, which
may read the log and append nothing; else DET_NATS_USER and DET_NATS_PASSWORD
say who it is.

Each line is the envelope in protobuf's JSON form (field names as in
events.proto) plus "sequence"; follow a chain with its correlation_id, and
an event's reason with its causation_id. Secrets (password hashes, tokens,
storage credentials, also inside config_json) are printed as "(redacted)"
(services/gateway/features/events/redaction.py). An event that is not well-formed
(services/common/wellformed.py: bytes that are no envelope, an unknown type,
an aggregate that does not match its subject) is the line
{"sequence": N, "unreadable": "<why>"}.
"""

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import cast

from google.protobuf import json_format
from pydantic import SecretStr

from services.common.connection import Connection
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.common.logging import configure_logging
from services.common.settings import NatsCredentials
from services.gateway.features.events.redaction import redacted_fields

OPERATOR = "operator"


def envelope_line(stored: StoredEvent) -> str:
    """The event as a JSON line; one that is not well-formed (wellformed.py)
    as its sequence and why it cannot be read, which the tool prints and
    goes on (it is also logged to stderr as event_skipped)."""
    if stored.skipped:
        return json.dumps({"sequence": stored.sequence, "unreadable": stored.skipped})
    fields = json_format.MessageToDict(stored.envelope, preserving_proto_field_name=True)
    return json.dumps({"sequence": stored.sequence, **redacted_fields(fields)})


async def print_events(store: EventStore, kinds: list[str] | None, start: int, follow: bool) -> None:
    if not follow and await store.last_sequence() < start:
        return
    reading = cast(AsyncGenerator[StoredEvent, None], store.read(kinds, start_sequence=start, follow=follow))
    async with contextlib.aclosing(reading) as events:
        async for stored in events:
            sys.stdout.write(envelope_line(stored) + "\n")
            sys.stdout.flush()


def operator_login(credentials_file: Path) -> NatsCredentials:
    """The `operator` user of a cluster's credentials.json (deploy/local/credentials.py)."""
    document = json.loads(credentials_file.expanduser().read_text())
    return NatsCredentials(user=OPERATOR, password=SecretStr(document["nats"][OPERATOR]["password"]))


async def run(options: argparse.Namespace) -> None:
    login = operator_login(options.credentials) if options.credentials else None
    # Not EventStore.connect: that makes missing streams, which a reader may not.
    store = EventStore(await Connection.open(options.nats_url, "eventlog", login), options.namespace)
    try:
        await print_events(store, options.kind or None, options.from_sequence, options.follow)
    finally:
        await store.close()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nats-url", default="nats://127.0.0.1:4222")
    parser.add_argument("--namespace", default="det")
    parser.add_argument(
        "--credentials", type=Path, help="a cluster's <data dir>/credentials.json: log in as operator"
    )
    parser.add_argument("--kind", action="append", help="only these aggregate kinds (experiment, trial, ...)")
    parser.add_argument("--from-sequence", type=int, default=1)
    parser.add_argument("--follow", action="store_true", help="keep printing new events")
    options = parser.parse_args()
    configure_logging("eventlog", json=False, log_file=None, level="WARNING")  # stderr: stdout is the log
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
