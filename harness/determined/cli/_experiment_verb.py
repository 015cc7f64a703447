"""The `det experiment` verbs that ask the master for one change to one
experiment (activate, pause, cancel, kill, archive, unarchive): each says why
nothing changed when the master says so, or "<Done> experiment N"."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from determined.cli._args import EXPERIMENT_ID
from determined.cli._client import connect


def add_experiment_verb(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Callable[[argparse.Namespace], int],
    what: str,
    aliases: tuple[str, ...] = (),
) -> None:
    """`det experiment <name> EXPERIMENT_ID`, with `what` as its help."""
    verb = verbs.add_parser(name, aliases=list(aliases), help=what)
    verb.add_argument("experiment_id", type=EXPERIMENT_ID)
    verb.set_defaults(run=run)


def experiment_verb(args: argparse.Namespace, verb: str, done: str) -> int:
    """Calls the <verb>Experiment RPC (Pause, Kill, ...) on args.experiment_id."""
    from determined.proto import api_pb2

    gateway = connect(args)
    request = getattr(api_pb2, f"{verb}ExperimentRequest")(experiment_id=args.experiment_id)
    response = gateway.call(getattr(gateway.stub, f"{verb}Experiment"), request)
    print(response.unchanged_reason or f"{done} experiment {args.experiment_id}")
    return 0
