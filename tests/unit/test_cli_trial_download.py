"""det trial download N --best|--latest|--uuid (as Determined 0.38): which of the
trial's checkpoints it asks for and takes (determined/cli/trial.py)."""

import argparse
from typing import Any

import pytest

from determined.cli import trial
from determined.cli.__main__ import build_parser
from determined.cli._client import CliError
from determined.proto import api_pb2


class Listing:
    """A gateway that answers GetTrialCheckpoints with `checkpoints` and records the request."""

    def __init__(self, *states: str) -> None:
        self.stub = self
        self.asked: list[api_pb2.GetTrialCheckpointsRequest] = []
        self.checkpoints = [api_pb2.Checkpoint(uuid=f"c{n}", state=state) for n, state in enumerate(states)]

    def GetTrialCheckpoints(self, request: Any) -> None:  # noqa: N802 - the RPC's name
        raise AssertionError("called through call()")

    def call(
        self, method: Any, request: api_pb2.GetTrialCheckpointsRequest
    ) -> api_pb2.GetCheckpointsResponse:
        self.asked.append(request)
        return api_pb2.GetCheckpointsResponse(checkpoints=self.checkpoints)


def parsed(*argv: str) -> argparse.Namespace:
    return build_parser(["trial"]).parse_args(["trial", "download", "3", *argv])


@pytest.mark.parametrize(
    ("argv", "sort_by", "order_by"),
    [
        (["--best"], "searcher_metric", ""),
        (["--latest"], "steps_completed", "desc"),
        (["--best", "--sort-by", "accuracy", "--smaller-is-better", "false"], "accuracy", "desc"),
        (["--best", "--sort-by", "loss", "--smaller-is-better", "TRUE"], "loss", "asc"),
    ],
)
def test_best_and_latest_ask_for_the_trial_s_checkpoints_sorted(
    argv: list[str], sort_by: str, order_by: str
) -> None:
    gateway = Listing("DELETED", "COMPLETED", "COMPLETED")
    chosen = trial._chosen_checkpoint(gateway, parsed(*argv))  # type: ignore[arg-type]
    assert chosen.uuid == "c1"
    [asked] = gateway.asked
    assert (asked.trial_id, asked.sort_by, asked.order_by) == (3, sort_by, order_by)


def test_a_trial_without_a_completed_checkpoint_is_refused() -> None:
    with pytest.raises(CliError, match="trial 3 has no completed checkpoint"):
        trial._chosen_checkpoint(Listing("DELETED"), parsed("--latest"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "refused"),
    [
        (["--best", "--sort-by", "loss"], "--sort-by and --smaller-is-better go together"),
        (["--latest", "--sort-by", "loss", "--smaller-is-better", "true"], "--sort-by goes with --best"),
    ],
)
def test_sort_by_goes_with_best_and_smaller_is_better(argv: list[str], refused: str) -> None:
    with pytest.raises(CliError, match=refused):
        trial.download_trial_checkpoint(parsed(*argv))


@pytest.mark.parametrize(
    "argv", [[], ["--best", "--latest"], ["--uuid", "a,b"], ["--best", "--smaller-is-better", "x"]]
)
def test_one_of_best_latest_uuid_is_needed(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parsed(*argv)
