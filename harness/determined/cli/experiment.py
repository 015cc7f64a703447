"""`det experiment` (`det e`): create, list, describe, pause, activate, kill experiments."""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from determined.cli import _args, _experiment_describe, _experiment_edit, _experiment_run
from determined.cli._args import EXPERIMENT_ID
from determined.cli._as_of import add_as_of_arguments, as_of, print_as_of
from determined.cli._client import CliError, Gateway, connect
from determined.cli._experiment_verb import add_experiment_verb, experiment_verb
from determined.cli._output import (
    compact_json,
    confirm,
    format_time,
    human_size,
    message_dict,
    print_json,
    print_table,
)
from determined.cli._upload import upload_context
from determined.cli.checkpoint import (
    LIST_HEADERS,
    add_listing_arguments,
    checkpoint_row,
    list_experiment_checkpoints,
    total_size,
)
from determined.cli.trial import outcome
from determined.common import states

if TYPE_CHECKING:
    from determined.common.context import ContextFiles

POLL_INTERVAL_S = 0.2
# How many of the context's notes (links followed or skipped) are printed before a count.
MAX_CONTEXT_NOTES = 20


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("experiment", aliases=["e"], help="manage experiments")
    verbs = parser.add_subparsers(dest="verb", metavar="<verb>")

    create = verbs.add_parser("create", help="create an experiment")
    create.add_argument("config_file", type=Path, help="experiment configuration (YAML)")
    create.add_argument("context", type=Path, nargs="?", help="folder uploaded as the trial's working dir")
    create.add_argument(
        "-i",
        "--include",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="also upload this file or folder, under its own name at the root (repeatable)",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --config searcher.max_trials=4 (repeatable)",
    )
    mode = create.add_mutually_exclusive_group()
    mode.add_argument(
        "-f",
        "--follow-first-trial",
        "--follow",
        dest="follow",
        action="store_true",
        help="follow the first trial's logs until it ends",
    )
    mode.add_argument("--paused", action="store_true", help="create the experiment paused")
    mode.add_argument(
        "-t",
        "--test-mode",
        action="store_true",
        help="run the model definition for one batch and report whether it works",
    )
    create.add_argument(
        "--local", action="store_true", help="with --test-mode: run on this machine, without a cluster"
    )
    create.set_defaults(run=create_experiment)

    config = verbs.add_parser("config", help="print the stored, fully defaulted config as YAML")
    config.add_argument("experiment_id", type=EXPERIMENT_ID)
    config.set_defaults(run=print_config, at=None, at_seq=None)

    trials = verbs.add_parser("list-trials", aliases=["lt"], help="list an experiment's trials")
    trials.add_argument("experiment_id", type=EXPERIMENT_ID)
    trials.add_argument("--json", action="store_true")
    add_as_of_arguments(trials)
    trials.set_defaults(run=list_trials)

    checkpoints = verbs.add_parser("list-checkpoints", aliases=["lc"], help="an experiment's checkpoints")
    checkpoints.add_argument("experiment_id", type=EXPERIMENT_ID)
    add_listing_arguments(checkpoints)
    checkpoints.set_defaults(run=list_experiment_checkpoints)

    add_experiment_verb(
        verbs, "activate", activate_experiment, "start or resume a PAUSED experiment", aliases=("unpause",)
    )
    add_experiment_verb(
        verbs,
        "pause",
        pause_experiment,
        "pause an experiment: its trials checkpoint and stop, to resume when it is activated",
    )

    setting = verbs.add_parser(
        "set",
        help="change an experiment's name or description, a running one's priority, weight or max slots,"
        " or its checkpoint GC policy",
    )
    what = setting.add_subparsers(dest="setting", metavar="<setting>", required=True)
    for name, value_type, value_help in (
        ("priority", _args.priority, "1 to 99; lower runs first (priority pools)"),
        ("weight", _args.weight, "its share of the slots (fair-share pools), above 0"),
        ("max-slots", _args.max_slots, "the most slots it may hold; none for no cap"),
    ):
        change = what.add_parser(name, help=f"set the experiment's {name.replace('-', ' ')}")
        change.add_argument("experiment_id", type=EXPERIMENT_ID)
        change.add_argument("value", type=value_type, help=value_help)
        change.set_defaults(run=set_resource)
    policy = what.add_parser(
        "gc-policy",
        help="change which checkpoints garbage collection keeps; an ended experiment's are "
        "collected at once (previewed and confirmed first)",
    )
    policy.add_argument("experiment_id", type=EXPERIMENT_ID)
    for knob, knob_help in (
        ("save-experiment-best", "keep the N best checkpoints of the experiment"),
        ("save-trial-best", "keep the N best checkpoints of each trial"),
        ("save-trial-latest", "keep the N latest checkpoints of each trial"),
    ):
        policy.add_argument(f"--{knob}", type=_args.count, required=True, metavar="N", help=knob_help)
    go = policy.add_mutually_exclusive_group()
    go.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    go.add_argument("--dry-run", action="store_true", help="only show what the policy would delete")
    policy.add_argument("--json", action="store_true")
    policy.set_defaults(run=set_gc_policy)

    delete = verbs.add_parser(
        "delete", help="delete an ended experiment: every checkpoint of it, then the experiment from listings"
    )
    delete.add_argument("experiment_id", type=EXPERIMENT_ID)
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.add_argument("--json", action="store_true")
    delete.set_defaults(run=delete_experiment)

    add_experiment_verb(verbs, "kill", kill_experiment, "kill an experiment's trials; it ends CANCELED")
    _experiment_edit.add_parsers(parser, verbs, what)
    _experiment_run.add_verbs(verbs)


def create_experiment(args: argparse.Namespace) -> int:

    if args.local and not args.test_mode:
        raise CliError("--local needs --test-mode (det experiment create --local --test-mode CONFIG CONTEXT)")
    config_yaml = _read_config(args.config_file, args.config)
    if args.local:
        from determined.cli import _test_mode

        return _test_mode.run_local(config_yaml, args.context, args.include)
    files = prepare_context(args.context, args.include)
    gateway = connect(args)
    context_hash = upload_context(gateway, files) if files else ""
    if args.test_mode:
        from determined.cli import _test_mode

        return _test_mode.run_on_cluster(gateway, config_yaml, context_hash)
    response = submit(gateway, config_yaml, context_hash, activate=not args.paused, parent_id=args.parent)
    for warning in response.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Created experiment {response.experiment_id}", flush=True)
    if not args.follow:
        return 0
    return _follow_first_trial(gateway, response.experiment_id)


def submit(
    gateway: Gateway, config_yaml: str, context_hash: str, *, activate: bool, parent_id: int = 0
) -> Any:
    """CreateExperiment with a request id of its own, which makes it safe to
    retry while the master restarts: a repeat answers with the same experiment.
    `context_hash`: the uploaded context ("" for none: a fork's `parent_id` then lends its own)."""
    from determined.proto import api_pb2

    request = api_pb2.CreateExperimentRequest(
        config_yaml=config_yaml,
        context_hash=context_hash,
        activate=activate,
        request_id=uuid.uuid4().hex,
        parent_id=parent_id,
    )
    return gateway.call(gateway.stub.CreateExperiment, request)


def _read_config(path: Path, overrides: list[str]) -> str:
    """The config text to send, validated here first so a typo costs no upload. Read
    within the config limits (size, nesting, aliases, hyperparameter values) that the
    master checks again."""
    import yaml

    from determined.common import expconf
    from determined.common.expconf._limits import size_exceeded

    if not path.is_file():
        raise CliError(f"config file {path} {'is not a file' if path.exists() else 'does not exist'}")
    try:
        size = path.stat().st_size
        if size > expconf.MAX_CONFIG_BYTES:
            raise size_exceeded(size)
        text = path.read_text(encoding="utf-8")
        raw = expconf.parse_yaml(text)
        if overrides:
            raw = expconf.apply_overrides(raw or {}, overrides)
            text = yaml.safe_dump(raw, sort_keys=False)
        expconf.load_config(raw)
    except UnicodeDecodeError as problem:
        raise CliError(f"{path} is not UTF-8 text: {problem.reason} at byte {problem.start}") from None
    except expconf.InvalidConfigError as problem:
        raise CliError(f"{path} is not a valid experiment config:\n{problem}") from None
    return text


def prepare_context(folder: Path | None, includes: list[Path]) -> ContextFiles | None:
    """What the upload will hold, checked before anything is sent (None when
    there is nothing to send)."""
    from determined.common import context

    if folder is None and not includes:
        return None
    try:
        files = context.context_files(folder, includes=includes)
    except context.ContextError as problem:
        raise CliError(str(problem)) from None
    say_context_notes(files)
    sources = ", ".join(str(path.resolve()) for path in ([folder] if folder else []) + includes)
    print(
        f"Preparing files ({sources}) to send to master... "
        f"{human_size(files.content_size)} and {files.file_count} files",
        flush=True,
    )
    return files


def say_context_notes(files: ContextFiles) -> None:
    """Tells the user, on stderr, what packing did with links and which files it left out
    though .detignore does not say so."""
    for note in files.notes[:MAX_CONTEXT_NOTES]:
        print(f"note: {note}", file=sys.stderr)
    if len(files.notes) > MAX_CONTEXT_NOTES:
        print(
            f"note: ... and {len(files.notes) - MAX_CONTEXT_NOTES} more links or files like these",
            file=sys.stderr,
        )


def _follow_first_trial(gateway: Gateway, experiment_id: int) -> int:
    from determined.proto import api_pb2

    print("Waiting for first trial to begin...", flush=True)
    while True:
        found = gateway.call(
            gateway.stub.GetExperiment, api_pb2.GetExperimentRequest(experiment_id=experiment_id)
        )
        if found.trials:
            break
        if states.is_ended(found.experiment.state):
            reason = f": {found.experiment.end_reason}" if found.experiment.end_reason else ""
            raise CliError(
                f"experiment {experiment_id} ended {found.experiment.state} before a trial began{reason}"
            )
        time.sleep(POLL_INTERVAL_S)
    trial_id = min(t.id for t in found.trials)
    print(f"Following first trial with ID {trial_id}", flush=True)
    return _experiment_run.follow_to_end(gateway, trial_id)


def _get_experiment(args: argparse.Namespace) -> Any:
    from determined.proto import api_pb2

    gateway = connect(args)
    return gateway.call(
        gateway.stub.GetExperiment,
        api_pb2.GetExperimentRequest(experiment_id=args.experiment_id, as_of=as_of(args)),
    )


def describe_experiment(args: argparse.Namespace) -> int:
    if args.config:
        return print_config(args)
    response = _get_experiment(args)
    if args.json:
        print_json(message_dict(response))
        return 0
    print_as_of(response)
    e = response.experiment
    print_table(
        ["Experiment ID", "State", "Progress", "Started", "Ended", "Name", "Searcher", "Metric", "Labels"],
        [[*_experiment_describe.summary_cells(e), e.searcher_name, e.searcher_metric, ", ".join(e.labels)]],
    )
    if e.end_reason:
        print(f"Ended {e.state}: {e.end_reason}")
    _experiment_describe.print_details(e)
    print()
    _print_trials(response.trials)
    return 0


def print_config(args: argparse.Namespace) -> int:
    import json

    import yaml

    response = _get_experiment(args)
    print(yaml.safe_dump(json.loads(response.experiment.config_json), sort_keys=False), end="")
    return 0


def list_trials(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    gateway = connect(args)
    response = gateway.call(
        gateway.stub.GetExperimentTrials,
        api_pb2.GetExperimentTrialsRequest(experiment_id=args.experiment_id, as_of=as_of(args)),
    )
    if args.json:
        print_json([message_dict(t) for t in response.trials])
        return 0
    print_as_of(response)
    _print_trials(response.trials)
    return 0


def _print_trials(trials: Any) -> None:
    print_table(
        [
            "Trial ID",
            "State",
            "H-Params",
            "Started",
            "Ended",
            "# of Batches",
            "Rung",
            "Restarts",
            "Reason",
            "Latest Training",
            "Latest Validation",
        ],
        [
            [
                t.id,
                t.state,
                compact_json(t.hparams_json),
                format_time(t.started_at_ns),
                format_time(t.ended_at_ns),
                t.total_batches,
                t.rung,
                t.restarts,
                outcome(t),
                compact_json(t.latest_training.metrics_json),
                compact_json(t.latest_validation.metrics_json),
            ]
            for t in trials
        ],
    )


def activate_experiment(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Activate", "Activated")


def pause_experiment(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Pause", "Paused")


def kill_experiment(args: argparse.Namespace) -> int:
    return experiment_verb(args, "Kill", "Killed")


def set_resource(args: argparse.Namespace) -> int:
    from determined.cli.job import send_update

    field = args.setting.replace("-", "_")
    print(send_update(connect(args), f"experiment/{args.experiment_id}", **{field: args.value}))
    return 0


def set_gc_policy(args: argparse.Namespace) -> int:
    """Shows what the new policy deletes now (and the bytes it frees), asks,
    then sets it: the checkpoint service collects an ended experiment's
    checkpoints at once, a running one's when it ends."""
    from determined.proto import api_pb2

    policy = {
        "save_experiment_best": args.save_experiment_best,
        "save_trial_best": args.save_trial_best,
        "save_trial_latest": args.save_trial_latest,
    }
    gateway = connect(args)
    preview = gateway.call(
        gateway.stub.PreviewGc, api_pb2.PreviewGcRequest(experiment_id=args.experiment_id, **policy)
    )
    if not args.json:
        _print_preview(args.experiment_id, policy, preview)
    applied, unchanged = False, ""
    if not args.dry_run and (args.yes or confirm("Apply the new policy?")):
        response = gateway.call(
            gateway.stub.SetGcPolicy, api_pb2.SetGcPolicyRequest(experiment_id=args.experiment_id, **policy)
        )
        applied, unchanged = not response.unchanged_reason, response.unchanged_reason
    if args.json:
        print_json(
            {
                "experiment_id": args.experiment_id,
                "policy": policy,
                "applied": applied,
                "unchanged_reason": unchanged,
                "bytes": preview.bytes,
                "checkpoints": [message_dict(c) for c in preview.checkpoints],
            }
        )
    elif unchanged:
        print(unchanged)
    elif applied:
        print(f"Set the GC policy of experiment {args.experiment_id}: {_policy_text(policy)}")
    elif not args.dry_run:
        print("Aborted: the policy is unchanged.", file=sys.stderr)
    return 0


def _policy_text(policy: dict[str, int]) -> str:
    return ", ".join(f"{knob}={value}" for knob, value in policy.items())


def _print_preview(experiment_id: int, policy: dict[str, int], preview: Any) -> None:
    if not preview.checkpoints:
        print(f"{_policy_text(policy)} deletes no checkpoint of experiment {experiment_id} now.")
        return
    print(
        f"{_policy_text(policy)} deletes these {len(preview.checkpoints)} checkpoints of experiment "
        f"{experiment_id}, freeing {human_size(preview.bytes)}:"
    )
    print_table(
        LIST_HEADERS, [checkpoint_row(c, size=human_size(total_size(c))) for c in preview.checkpoints]
    )


def delete_experiment(args: argparse.Namespace) -> int:
    from determined.proto import api_pb2

    question = (
        f"Delete experiment {args.experiment_id}? Every checkpoint of it is deleted from the storage, "
        "then it disappears from listings (the event log keeps its history)."
    )
    if not args.yes and not confirm(question):
        print("Aborted: nothing deleted.", file=sys.stderr)
        return 0
    gateway = connect(args)
    gateway.call(
        gateway.stub.DeleteExperiment, api_pb2.DeleteExperimentRequest(experiment_id=args.experiment_id)
    )
    if args.json:
        print_json({"experiment_id": args.experiment_id, "deletion": "in progress"})
    else:
        print(f"Deletion of experiment {args.experiment_id} is in progress")
    return 0
