"""A trial whose reports the cluster can never store (an uncaught ReportError) fails
once, saying why, whatever its max_restarts: the harness tells the agent
(DET_FATAL_ERROR_FILE), the agent's AllocationExited says `fatal`, and the
searcher ends the trial without restarting it. Searcher, scheduler and agent
against a real nats-server; the trial is a real Core API script."""

from pathlib import Path

from test_services_flow import (
    ES,
    TS,
    cluster,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    wait_for,
)

from deploy.local.servers import free_port
from determined.proto import events_pb2 as ev
from services.common.eventstore import EventStore

# A training report over the harness's 1 MiB limit: refused at the call, every time.
SCRIPT = """
import determined as det
with det.core.init() as core_context:
    core_context.train.report_training_metrics(steps_completed=1, metrics={"loss": "x" * 2_000_000})
"""


async def test_an_uncaught_report_error_fails_the_trial_once_saying_why(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    # No gateway: the report is refused by the harness before anything is sent.
    async with cluster(settings, tmp_path / "work", master_address=f"127.0.0.1:{free_port()}"):
        await create_experiment(
            event_store,
            1,
            config(["python3", "-c", SCRIPT], max_restarts=3, checkpoint_storage=storage(tmp_path)),
        )
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.fatal and exited.exit_code == 1
    assert exited.error.startswith("the cluster cannot store the trial's reports: ReportError: ")
    assert "steps_completed=1" in exited.error
    [ended] = payloads(envelopes, ev.TrialEnded)
    assert ended.state == TS.TRIAL_STATE_ERROR
    assert (
        ended.reason
        == f"allocation 1.1 exited with code 1: {exited.error} (not restarted: a restart would fail the same way)"
    )
    [changed] = payloads(envelopes, ev.ExperimentStateChanged)
    assert changed.state == ES.EXPERIMENT_STATE_ERROR


async def test_a_failure_without_a_reason_is_still_restarted(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, config(["sh", "-c", "exit 3"], max_restarts=1))
        envelopes = await wait_for(event_store, experiment_ended)
    assert [(x.exit_code, x.fatal) for x in payloads(envelopes, ev.AllocationExited)] == [
        (3, False),
        (3, False),
    ]


def storage(tmp_path: Path) -> dict[str, str]:
    return {"type": "shared_fs", "host_path": str(tmp_path / "checkpoints")}
