"""`det events export [the filters of det events] > bundle.jsonl`: the events a filter selects,
through the gateway with the user's login (GetEvents: what the user may read, secrets
redacted), as a bundle that `det deploy local replay` starts a read-only cluster over.

The bundle is JSON lines: a header line {"determined_es_bundle": 1, "exported_at", "filter",
"cluster_id"}, then one line per event in the form `python -m services.eventlog` prints (the
envelope in protobuf's JSON form, field names as in events.proto, plus "sequence"), so that
both tools' outputs are one format; an event the log could not read is {"sequence": N,
"unreadable": "..."} in both.
"""

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from determined.cli._client import connect
from determined.cli._output import notice

if TYPE_CHECKING:
    from determined.proto import api_pb2

FORMAT = 1
# The Envelope's fields before its payload, in field-number order (as protobuf's JSON form lists them).
ENVELOPE_FIELDS = ("event_id", "aggregate", "occurred_at_ns", "actor", "correlation_id", "causation_id")


def add_export_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from determined.cli.events import add_filter_arguments

    parser = subparsers.add_parser(
        "export",
        help="write the events a filter selects as a bundle (JSON lines) for det deploy local replay",
        description="Write the events that det events would list (the same filters; secrets redacted) "
        "as JSON lines on standard output: a header, then one event per line as python -m "
        "services.eventlog prints it. det deploy local replay BUNDLE starts a read-only cluster over it.",
    )
    add_filter_arguments(parser)
    parser.set_defaults(run=export)


def export(args: argparse.Namespace) -> int:
    from determined.cli.events import event_filter
    from determined.proto import api_pb2

    gateway = connect(args)
    master = gateway.call(gateway.stub.GetMaster, api_pb2.GetMasterRequest())
    request = api_pb2.GetEventsRequest(filter=event_filter(args))
    out = sys.stdout
    out.write(header_line(request.filter, master.cluster_id, time.time()) + "\n")
    count = 0
    for response in gateway.stream(gateway.stub.GetEvents, request):
        for event in response.events:
            out.write(bundle_line(event) + "\n")
            count += 1
    out.flush()
    notice(f"exported {count} events")
    return 0


def header_line(event_filter: "api_pb2.EventFilter", cluster_id: str, exported_at_s: float) -> str:
    from google.protobuf import json_format

    return json.dumps(
        {
            "determined_es_bundle": FORMAT,
            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(exported_at_s)),
            "filter": json_format.MessageToDict(event_filter, preserving_proto_field_name=True),
            "cluster_id": cluster_id,
        }
    )


def bundle_line(event: "api_pb2.LoggedEvent") -> str:
    """The event as `python -m services.eventlog` prints it: fields left at their default
    omitted, as protobuf's JSON form omits them, and int64 numbers as strings."""
    if not event.type:
        return json.dumps({"sequence": event.sequence, "unreadable": event.summary})
    fields: dict[str, Any] = {"sequence": event.sequence}
    for name in ENVELOPE_FIELDS:
        value = getattr(event, name)
        if value:
            fields[name] = str(value) if name == "occurred_at_ns" else value
    fields[event.type] = json.loads(event.payload_json or "{}")
    return json.dumps(fields)
