"""`det events explain trial N | experiment N | allocation ID`: why things
happened, as the causation tree of their events (ExplainEvents): from the
user's command through each service's decision, each line indented under the
event it answers, then where it stands or how it ended.

    2026-11-27T12:00:01.002+00:00  experiment_created  user:alice  experiment 3 'asha' created by alice
      2026-11-27T12:00:01.120+00:00  trial_created  service:searcher  trial 7 of experiment 3 created — ASHA: ...
    Outcome: stopped: cut at rung 0 (58 batches): loss 0.81 not in the top 1/4 of 8
"""

import argparse
import sys
from typing import Any

from determined.cli._client import connect

KINDS = ("trial", "experiment", "allocation")
INDENT = "  "


def add_explain_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "explain",
        help="why a trial, experiment or allocation got where it is: its events' causation tree",
        description="The events of a trial (its runs, validations, checkpoints and the experiment's"
        " commands that led to them), an experiment (and its trials) or an allocation (and what led"
        " to it), each under the event it answers: time, type, actor, what happened — why; then the"
        " outcome. Admins explain anything; other users what they own.",
    )
    parser.add_argument("kind", choices=KINDS, help="what to explain")
    parser.add_argument(
        "id", metavar="ID", help="its id: a trial or experiment number, an allocation id (7.1)"
    )
    parser.add_argument("--json", action="store_true", help="the ExplainEventsResponse, protobuf's JSON form")
    parser.set_defaults(run=explain)


def explain(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from determined.proto import api_pb2

    gateway = connect(args)
    answer = gateway.call(
        gateway.stub.ExplainEvents, api_pb2.ExplainEventsRequest(kind=args.kind, id=args.id)
    )
    if args.json:
        sys.stdout.write(json_format.MessageToJson(answer, indent=None) + "\n")
        return 0
    sys.stdout.write("".join(explained_line(node) + "\n" for node in answer.chain))
    sys.stdout.write(f"Outcome: {answer.outcome}\n")
    return 0


def explained_line(node: Any) -> str:
    """One event of the tree, indented by its depth: time  type  actor  summary — reason."""
    from determined.cli.events import local_time

    event = node.event
    what = f"{event.summary} — {event.reason}" if event.reason else event.summary
    return f"{INDENT * node.depth}{local_time(event.occurred_at_ns)}  {event.type or '(unreadable)'}  {event.actor}  {what}"
