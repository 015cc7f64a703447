"""`det experiment describe` of several experiments, as Determined 0.38's: the
experiments, their trials and, with --metrics, each trial's metrics step by
step, as tables, CSV (--csv) or files (--outdir); one experiment without those
flags: det experiment describe's own view (cli/experiment.py)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from determined.cli._args import EXPERIMENT_ID
from determined.cli._as_of import as_of
from determined.cli._client import CliError, Gateway, connect
from determined.cli._output import format_time, message_dict, print_csv, print_json, print_table

if TYPE_CHECKING:
    from determined.proto import api_pb2

# The most experiments one describe names.
MAX_DESCRIBED = 100


def experiment_ids(text: str) -> list[int]:
    """Comma-separated experiment ids (Determined's describe takes them so), each once."""
    ids = list(dict.fromkeys(EXPERIMENT_ID(part) for part in text.split(",")))
    if len(ids) > MAX_DESCRIBED:
        raise argparse.ArgumentTypeError(f"at most {MAX_DESCRIBED} experiments at once, not {len(ids)}")
    return ids


def describe_experiments(args: argparse.Namespace) -> int:
    """One experiment without --metrics, --csv or --outdir: det experiment
    describe's own view. Otherwise Determined's tables: the experiments, their
    trials and, with --metrics, each trial's metrics step by step."""
    from determined.cli import experiment

    ids: list[int] = args.experiment_ids
    if len(ids) == 1 and not (args.metrics or args.csv or args.outdir):
        args.experiment_id = ids[0]
        return experiment.describe_experiment(args)
    if args.config:
        raise CliError("--config prints one experiment's config: name one experiment, without --metrics")
    gateway = connect(args)
    found = [_described(gateway, experiment_id, args) for experiment_id in ids]
    if args.json:
        print_json([message_dict(response) for response in found])
        return 0
    write = _writer(args)
    write("Experiment", "experiments.csv", EXPERIMENT_HEADERS, [_experiment_row(r.experiment) for r in found])
    write("Trials", "trials.csv", TRIAL_HEADERS, [_trial_row(t) for r in found for t in r.trials])
    if args.metrics:
        headers, rows = _workloads(gateway, found)
        write("Workloads", "workloads.csv", headers, rows)
    return 0


def print_details(e: api_pb2.Experiment) -> None:
    """What describe's own view adds below its table when set."""
    for shown, line in (
        (e.description, f"Description: {e.description}"),
        (e.parent_id, f"Forked from experiment {e.parent_id}"),
        (e.archived, "Archived"),
        (e.unmanaged, "Unmanaged: a detached run (core_v2), reported by a script outside the cluster"),
        (e.notes, f"Notes:\n{e.notes}"),
    ):
        if shown:
            print(line)


EXPERIMENT_HEADERS = [
    "Experiment ID",
    "State",
    "Progress",
    "Started",
    "Ended",
    "Name",
    "Description",
    "Archived",
    "Resource Pool",
    "Labels",
    "Parent ID",
]
TRIAL_HEADERS = ["Trial ID", "Experiment ID", "State", "Started", "Ended", "# of Batches", "H-Params"]


def _described(
    gateway: Gateway, experiment_id: int, args: argparse.Namespace
) -> api_pb2.GetExperimentResponse:
    from determined.proto import api_pb2

    request = api_pb2.GetExperimentRequest(experiment_id=experiment_id, as_of=as_of(args))
    response: api_pb2.GetExperimentResponse = gateway.call(gateway.stub.GetExperiment, request)
    return response


def _writer(args: argparse.Namespace) -> Callable[[str, str, Sequence[str], Sequence[Sequence[Any]]], None]:
    """Writes one table: to DIR/<file> with --outdir, as CSV with --csv, else titled."""
    if args.outdir:
        args.outdir.mkdir(parents=True, exist_ok=True)

    def write(title: str, file_name: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        if args.outdir:
            with (args.outdir / file_name).open("w", encoding="utf-8", newline="") as out:
                print_csv(headers, rows, out)
        elif args.csv:
            print_csv(headers, rows)
        else:
            print(f"{title}:" if title == "Experiment" else f"\n{title}:")
            print_table(headers, rows)

    return write


def summary_cells(e: api_pb2.Experiment) -> list[Any]:
    """The cells every experiment table starts with: ID, State, Progress, Started, Ended, Name."""
    return [
        e.id,
        e.state,
        f"{e.progress:.1%}",
        format_time(e.started_at_ns),
        format_time(e.ended_at_ns),
        e.name,
    ]


def _experiment_row(e: api_pb2.Experiment) -> list[Any]:
    return [
        *summary_cells(e),
        e.description,
        e.archived,
        e.resource_pool,
        ", ".join(sorted(e.labels)),
        e.parent_id or "",
    ]


def _trial_row(t: api_pb2.Trial) -> list[Any]:
    hparams = json.dumps(json.loads(t.hparams_json or "{}"), sort_keys=True)
    return [
        t.id,
        t.experiment_id,
        t.state,
        format_time(t.started_at_ns),
        format_time(t.ended_at_ns),
        t.total_batches,
        hparams,
    ]


def _workloads(
    gateway: Gateway, found: Sequence[api_pb2.GetExperimentResponse]
) -> tuple[list[str], list[list[Any]]]:
    """One row per trial and step: its training and validation metrics (a
    column per name, over all the experiments) and the checkpoint taken there."""
    from determined.proto import api_pb2

    steps: dict[tuple[int, int], dict[str, Any]] = {}
    for response in found:
        for trial in response.trials:
            request = api_pb2.GetTrialMetricsRequest(trial_id=trial.id)
            for answer in gateway.stream(gateway.stub.GetTrialMetrics, request):
                for point in answer.points:
                    row = steps.setdefault((trial.id, point.steps_completed), {"time": 0, "metrics": {}})
                    row["time"] = max(row["time"], point.reported_at_ns)
                    row["metrics"][point.group] = json.loads(point.metrics_json or "{}")
        checkpoints = gateway.call(
            gateway.stub.GetExperimentCheckpoints,
            api_pb2.GetExperimentCheckpointsRequest(experiment_id=response.experiment.id),
        )
        for checkpoint in checkpoints.checkpoints:
            row = steps.setdefault(
                (checkpoint.trial_id, checkpoint.steps_completed), {"time": 0, "metrics": {}}
            )
            row["checkpoint"] = checkpoint
    training = sorted({key for row in steps.values() for key in row["metrics"].get("training", {})})
    validation = sorted({key for row in steps.values() for key in row["metrics"].get("validation", {})})
    headers = (
        ["Trial ID", "# of Batches", "Report Time"]
        + [f"Training Metric: {key}" for key in training]
        + ["Checkpoint State", "Checkpoint Report Time"]
        + [f"Validation Metric: {key}" for key in validation]
    )
    rows = [
        [trial_id, steps_completed, format_time(row["time"])]
        + [row["metrics"].get("training", {}).get(key) for key in training]
        + _checkpoint_cells(row.get("checkpoint"))
        + [row["metrics"].get("validation", {}).get(key) for key in validation]
        for (trial_id, steps_completed), row in sorted(steps.items())
    ]
    return headers, rows


def _checkpoint_cells(checkpoint: api_pb2.Checkpoint | None) -> list[Any]:
    return ["", ""] if checkpoint is None else [checkpoint.state, format_time(checkpoint.reported_at_ns)]
