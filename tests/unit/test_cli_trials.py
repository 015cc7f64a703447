"""How the CLI shows trials: how far each got and why it stopped or ended."""

import json

import pytest

from determined.cli.__main__ import build_parser
from determined.cli.experiment import _print_trials, pause_experiment
from determined.cli.trial import kill_trial, outcome
from determined.proto import api_pb2


def test_the_systems_reason_comes_first_then_the_state() -> None:
    cut = api_pb2.Trial(state="COMPLETED", end_reason="cut at rung 0 (58 batches)")
    assert outcome(cut) == "cut at rung 0 (58 batches)"
    assert (
        outcome(api_pb2.Trial(state="RUNNING", end_reason="reached the top rung")) == "reached the top rung"
    )
    assert [outcome(api_pb2.Trial(state=s)) for s in ("PAUSED", "COMPLETED", "ERROR", "RUNNING")] == [
        "paused",
        "completed",
        "error",
        "",
    ]


def test_trials_show_batches_rung_and_reason(capsys: pytest.CaptureFixture[str]) -> None:
    trial = api_pb2.Trial(
        id=7,
        state="COMPLETED",
        total_batches=234,
        rung=1,
        hparams_json='{"lr": 0.1}',
        end_reason="cut at rung 1 (234 batches)",
    )
    trial.latest_validation.metrics_json = '{"loss": 0.5}'
    _print_trials([trial])
    header, _, row = capsys.readouterr().out.splitlines()
    cells = dict(
        zip([h.strip() for h in header.split("|")], [c.strip() for c in row.split("|")], strict=True)
    )
    assert (cells["# of Batches"], cells["Rung"], cells["Reason"]) == (
        "234",
        "1",
        "cut at rung 1 (234 batches)",
    )
    assert json.loads(cells["Latest Validation"]) == {"loss": 0.5}


def test_pause_and_kill_trial_are_commands() -> None:
    parser = build_parser()
    assert parser.parse_args(["e", "pause", "3"]).run is pause_experiment
    args = parser.parse_args(["t", "kill", "12"])
    assert (args.run, args.trial_id) == (kill_trial, 12)
