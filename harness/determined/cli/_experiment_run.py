"""`det experiment` verbs that act on an experiment's run, with Determined
0.38's names and flags: cancel, continue (--config-file, --config, -f), wait
(--polling-interval; exit 0 only for COMPLETED) and logs (the first trial's,
with `det trial logs`'s flags)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from determined.cli._args import EXPERIMENT_ID
from determined.cli._client import CliError, Gateway, connect
from determined.cli._experiment_verb import add_experiment_verb, experiment_verb
from determined.cli._log_filters import add_log_filter_args, log_request
from determined.common import states

# `det experiment wait`'s default, as 0.38's.
POLLING_INTERVAL_S = 5.0
# How often `continue -f` looks whether the trial trains again.
REOPEN_POLL_S = 0.2


def add_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_experiment_verb(
        verbs,
        "cancel",
        cancel_experiment,
        "cancel an experiment: its trials checkpoint and stop, and it ends CANCELED",
    )

    proceed = verbs.add_parser(
        "continue",
        help="train an ended single-searcher experiment's trial again, from its latest checkpoint "
        "(with a longer searcher.max_length, say)",
    )
    proceed.add_argument("experiment_id", type=EXPERIMENT_ID)
    proceed.add_argument(
        "--config-file",
        type=Path,
        metavar="FILE",
        help="config fields to change (YAML), merged over the experiment's",
    )
    proceed.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one config field, e.g. --config searcher.max_length.batches=2000 (repeatable)",
    )
    proceed.add_argument(
        "-f", "--follow-first-trial", dest="follow", action="store_true", help="follow the trial's logs"
    )
    proceed.set_defaults(run=continue_experiment)

    wait = verbs.add_parser(
        "wait", help="wait until the experiment ends; exit 0 if it COMPLETED, 1 otherwise"
    )
    wait.add_argument("experiment_id", type=EXPERIMENT_ID)
    wait.add_argument(
        "--polling-interval",
        type=_seconds,
        default=POLLING_INTERVAL_S,
        metavar="S",
        help=f"seconds between two looks at its state (default {POLLING_INTERVAL_S:g})",
    )
    wait.set_defaults(run=wait_experiment)

    logs = verbs.add_parser("logs", help="the logs of the experiment's first trial")
    logs.add_argument("experiment_id", type=EXPERIMENT_ID)
    add_log_filter_args(logs)
    logs.set_defaults(run=experiment_logs)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.01 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is not from 0.01 to 3600 seconds")
    return value


def cancel_experiment(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Cancel", "Canceled")


def continue_experiment(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    request = api_pb2.ContinueExperimentRequest(
        experiment_id=args.experiment_id, override_config_yaml=_overrides(args.config_file, args.config)
    )
    gateway = connect(args)
    gateway.call(gateway.stub.ContinueExperiment, request)
    print(f"Continued experiment {args.experiment_id}", flush=True)
    return _follow_continued(gateway, args.experiment_id) if args.follow else 0


def _overrides(path: Path | None, overrides: list[str]) -> str:
    """The config fields to change, as YAML: the file's, then the --config ones
    over them (checked here within the config limits; the master merges them
    over the experiment's config and validates the result)."""
    import yaml

    from determined.common import expconf

    try:
        fields = expconf.parse_yaml(_read(path)) if path is not None else {}
        if not isinstance(fields or {}, dict):
            raise CliError(f"{path} must hold a mapping of config fields")
        fields = expconf.apply_overrides(fields or {}, overrides)
    except expconf.InvalidConfigError as problem:
        raise CliError(f"invalid config overrides:\n{problem}") from None
    return yaml.safe_dump(fields, sort_keys=False) if fields else ""


def _read(path: Path) -> str:
    from determined.common import expconf

    if not path.is_file():
        raise CliError(f"config file {path} {'is not a file' if path.exists() else 'does not exist'}")
    if path.stat().st_size > expconf.MAX_CONFIG_BYTES:
        raise CliError(f"config file {path} is larger than {expconf.MAX_CONFIG_BYTES} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as problem:
        raise CliError(f"{path} is not UTF-8 text: {problem.reason} at byte {problem.start}") from None


def _follow_continued(gateway: Gateway, experiment_id: int) -> int:
    """Follows the continued trial's logs once the searcher has reopened it;
    exit 1 unless it COMPLETED."""
    trial_id = _reopened_trial(gateway, experiment_id)
    print(f"Following trial with ID {trial_id}", flush=True)
    return follow_to_end(gateway, trial_id)


def follow_to_end(gateway: Gateway, trial_id: int) -> int:
    """Prints the trial's logs until it ends (create -f, continue -f); exit 1
    unless it COMPLETED."""
    from determined.cli.trial import follow_logs, trial_state

    follow_logs(gateway, trial_id, follow=True)
    print(f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}")
    state = trial_state(gateway, trial_id)
    if state != states.TrialState.COMPLETED:
        print(f"Trial {trial_id} ended {state}", file=sys.stderr)
        return 1
    return 0


def _reopened_trial(gateway: Gateway, experiment_id: int) -> int:
    """The experiment's first trial once it trains again (its TrialReopened
    comes from the searcher just after the continue)."""
    while True:
        found = _experiment(gateway, experiment_id)
        live: list[int] = [t.id for t in found.trials if not states.is_ended(t.state)]
        if live:
            return min(live)
        if states.is_ended(found.experiment.state):
            raise CliError(
                f"experiment {experiment_id} ended {found.experiment.state} before its trial ran again"
            )
        time.sleep(REOPEN_POLL_S)


def _experiment(gateway: Gateway, experiment_id: int) -> Any:
    from determined.proto import api_pb2

    return gateway.call(gateway.stub.GetExperiment, api_pb2.GetExperimentRequest(experiment_id=experiment_id))


def wait_experiment(args: argparse.Namespace) -> int:
    """Looks at the experiment's state every --polling-interval seconds until
    it has ended (as 0.38's: a PAUSED one is refused, it would never end)."""
    gateway = connect(args)
    while True:
        experiment = _experiment(gateway, args.experiment_id).experiment
        if states.is_ended(experiment.state):
            break
        if experiment.state == states.ExperimentState.PAUSED:
            raise CliError(
                f"experiment {args.experiment_id} is PAUSED: it would never end; "
                f"activate it first (det experiment activate {args.experiment_id})"
            )
        time.sleep(args.polling_interval)
    reason = f": {experiment.end_reason}" if experiment.end_reason else ""
    print(f"Experiment {args.experiment_id} ended {experiment.state}{reason}")
    return 0 if experiment.state == states.ExperimentState.COMPLETED else 1


def experiment_logs(args: argparse.Namespace) -> int:
    """The logs of the experiment's first trial (the lowest id), as 0.38's."""
    from determined.cli.trial import write_logs
    from determined.proto import api_pb2

    gateway = connect(args)
    trials = gateway.call(
        gateway.stub.GetExperimentTrials, api_pb2.GetExperimentTrialsRequest(experiment_id=args.experiment_id)
    ).trials
    if not trials:
        raise CliError(f"experiment {args.experiment_id} has no trials yet")
    trial_id = min(t.id for t in trials)
    write_logs(gateway, log_request(args, trial_id), as_json=args.json)
    if args.follow:
        print(f"Trial log stream ended. To reopen log stream, run: det trial logs -f {trial_id}")
    return 0
