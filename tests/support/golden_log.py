"""Reading the golden event logs under tests/golden/ (see its README)."""

import gzip
import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from services.common.envelope import Envelope
from services.common.eventstore import EventStore

GOLDEN = Path(__file__).parents[1] / "golden"


def golden_log(name: str) -> list[Envelope]:
    """The envelopes of a log recorded with `python -m services.eventlog`
    (or written by bench/gen_log.py --jsonl; gzipped when it ends in .gz)."""
    envelopes = []
    path = GOLDEN / name
    text = gzip.decompress(path.read_bytes()).decode() if name.endswith(".gz") else path.read_text()
    for line in text.splitlines():
        fields = json.loads(line)
        fields.pop("sequence", None)
        envelopes.append(json_format.ParseDict(fields, Envelope()))
    return envelopes


async def stored_as_recorded(store: EventStore, envelopes: list[Envelope]) -> None:
    """Appends the recorded envelopes byte for byte (their times included)."""
    for envelope in envelopes:
        await store.js.publish(
            store.subject(envelope.aggregate),
            envelope.SerializeToString(),
            stream=store.events_stream,
            headers={"Nats-Msg-Id": envelope.event_id},
        )


class ReplayMismatch(AssertionError):
    """Today's core would not decide what the recorded log says it decided."""


# The reasons decisions carry for people (services/common/reasons.py): words,
# not decisions. Logs recorded before they were written (or worded) otherwise
# replay as long as everything else is the same.
WORDS = {
    "trial_created": "reason",
    "trial_stop_requested": "reason",
    "allocation_requested": "reason",
    "allocation_assigned": "reason",
}


def decision(field: str, payload: Any) -> Any:
    """The payload of a decision of type `field` without its words."""
    words = WORDS.get(field)
    if words is None:
        return payload
    decided = type(payload)()
    decided.CopyFrom(payload)
    decided.ClearField(words)
    return decided


def replay_decisions(core: Any, log: list[Envelope], actor: str, decided_types: set[str]) -> None:
    """Replays `log` step by step, as Temporal's replayer does: every event
    the log records as this core's decision (by `actor`, of one of
    `decided_types`) must be one the core decided, from the events before it,
    with the very same payload but for its words (WORDS); and once the whole
    log is folded, the core has nothing left to decide. Raises ReplayMismatch
    otherwise."""
    state = core.initial_state()
    decided: dict[str, Any] = {}
    for envelope in log:
        field = envelope.WhichOneof("payload")
        if envelope.actor == actor and field in decided_types:
            payload = decided.pop(envelope.event_id, None)
            if payload is None:
                raise ReplayMismatch(
                    f"the log has {envelope.event_id} ({field}), which today's core never decided"
                )
            if decision(field, payload) != decision(field, getattr(envelope, field)):
                raise ReplayMismatch(
                    f"{envelope.event_id}: the log has {getattr(envelope, field)}, today's core decides {payload}"
                )
        state = core.evolve(state, envelope)
        decided.update({append.msg_id: append.payload for append in core.decide(state)})
    left = [append.msg_id for append in core.decide(state)]
    if left:
        raise ReplayMismatch(f"today's core would still decide {left}")
