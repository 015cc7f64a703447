"""The gateway's side of stopping and resuming trials, against a real
nats-server and PostgreSQL: fencing of reports by allocation, validations on
their own subject, superseded metrics of a resumed run, WatchAllocation, stop
acknowledgements, pausing experiments and killing trials (also from the CLI)."""

import asyncio
import json
import sys
import time

import grpc
import pytest
import test_gateway
from google.protobuf.message import Message
from test_gateway import CONFIG, SECRET, given_trial, run_requested, stored

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.tokens import mint_allocation_token
from services.gateway.server import Gateway

Metadata = tuple[tuple[str, str], ...]
# test_gateway's started gateway (the api fixture on it comes from conftest.py).
gateway = test_gateway.gateway


def token_of(allocation_id: str) -> Metadata:
    trial_id = int(allocation_id.split(".")[0])
    return (("x-allocation-token", mint_allocation_token(SECRET, trial_id, allocation_id)),)


async def append(store: EventStore, gateway: Gateway, aggregate: str, payload: Message, msg_id: str) -> None:
    await store.append(Append(aggregate, payload, msg_id), actor="service:test")
    assert await gateway.projector.catch_up()


async def next_run(
    store: EventStore, gateway: Gateway, trial_id: int, run_id: int, resumed_at: int = 0
) -> None:
    """The trial's run `run_id - 1` exits and run `run_id` is requested."""
    previous = f"{trial_id}.{run_id - 1}"
    exited = events_pb2.AllocationExited(allocation_id=previous, trial_id=trial_id, exit_code=1)
    await append(store, gateway, f"allocation/{previous}", exited, f"exited-{previous}")
    await store.append(run_requested(trial_id, run_id, resumed_at), actor="service:searcher")
    assert await gateway.projector.catch_up()


def training(run_id: int, batch_seq: int, *steps: int) -> api_pb2.ReportMetricsRequest:
    reports = [
        events_pb2.MetricReport(group="training", steps_completed=s, metrics_json=f'{{"run": {run_id}}}')
        for s in steps
    ]
    return api_pb2.ReportMetricsRequest(
        trial_id=1, trial_run_id=run_id, batch_seq=batch_seq, reporter_id="p", reports=reports
    )


async def refused(call: object, code: grpc.StatusCode = grpc.StatusCode.FAILED_PRECONDITION) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call  # type: ignore[misc]
    assert raised.value.code() == code
    return raised.value.details() or ""


async def test_only_the_current_open_allocation_reports(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    progress = api_pb2.ReportProgressRequest(trial_id=1, progress=0.5, reporter_id="r", seq=1)
    await api.ReportProgress(progress, metadata=token_of("1.1"))
    await next_run(event_store, gateway, 1, 2)
    details = await refused(api.ReportProgress(progress, metadata=token_of("1.1")))
    assert details == "allocation 1.1 of trial 1 is closed (exited); reports from it are refused"
    # Refused again from memory, for every kind of report.
    await refused(api.ReportMetrics(training(1, 1, 10), metadata=token_of("1.1")))
    await api.ReportProgress(progress, metadata=token_of("1.2"))
    assert "unknown" in await refused(api.ReportProgress(progress, metadata=token_of("1.7")))


async def test_a_report_waits_for_the_projector_to_apply_its_request(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    gateway.projector_task.cancel()
    await asyncio.gather(gateway.projector_task, return_exceptions=True)
    await event_store.append(run_requested(1, 2), actor="service:searcher")
    request = api_pb2.ReportProgressRequest(trial_id=1, progress=0.5, reporter_id="r", seq=1)
    reporting = asyncio.ensure_future(api.ReportProgress(request, metadata=token_of("1.2")))
    await asyncio.sleep(0.3)
    assert not reporting.done()  # the request of 1.2 is stored but not applied yet
    gateway.projector_task = asyncio.create_task(gateway.projector.run())
    await asyncio.wait_for(reporting, 20)


async def test_validations_are_split_out_and_a_retried_batch_stores_once(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    request = training(1, 1, 10)
    request.reports.add(group="validation", steps_completed=10, metrics_json='{"loss": 0.5}')
    await api.ReportMetrics(request, metadata=token_of("1.1"))
    await api.ReportMetrics(request, metadata=token_of("1.1"))
    [batch] = await stored(event_store, "metrics")
    assert [r.group for r in batch.trial_metrics_reported.reports] == ["training"]
    [validation] = await stored(event_store, "validation")
    assert validation.trial_validation_reported.steps_completed == 10
    assert await gateway.projector.catch_up()
    trial = (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial
    assert trial.latest_validation.metrics_json == '{"loss": 0.5}'
    assert await gateway.pool.fetchval("SELECT count(*) FROM read_model.metrics") == 2


async def test_a_resumed_run_shows_every_step_once(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    await api.ReportMetrics(training(1, 1, 10, 20, 30), metadata=token_of("1.1"))
    await next_run(event_store, gateway, 1, 2, resumed_at=20)
    assert (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial.total_batches == 20
    await api.ReportMetrics(training(2, 1, 30, 40), metadata=token_of("1.2"))
    assert await gateway.projector.catch_up()
    response = await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))
    assert [(m.steps_completed, m.metrics_json) for m in response.metrics] == [
        (10, '{"run": 1}'),
        (20, '{"run": 1}'),
        (30, '{"run": 2}'),
        (40, '{"run": 2}'),
    ]
    assert (response.trial.total_batches, response.trial.runs, response.trial.restarts) == (40, 2, 1)


async def test_watch_answers_when_a_stop_is_stored_and_times_out_otherwise(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    known = api_pb2.WatchAllocationRequest(allocation_id="1.1", timeout_s=0.2)
    unchanged = await api.WatchAllocation(known, metadata=token_of("1.1"))
    assert (unchanged.stop, unchanged.searcher_length, unchanged.searcher_stopped) == (False, 0, False)

    started = time.monotonic()
    request = api_pb2.WatchAllocationRequest(allocation_id="1.1", timeout_s=50)
    watching = asyncio.ensure_future(api.WatchAllocation(request, metadata=token_of("1.1")))
    await asyncio.sleep(0.3)
    assert not watching.done()
    stop = events_pb2.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="experiment paused")
    await event_store.append(Append("allocation/1.1", stop, "stop-1.1"), actor="service:searcher")
    answer = await asyncio.wait_for(watching, 20)
    assert time.monotonic() - started < 20  # long before the 50 s timeout
    assert (answer.stop, answer.reason) == (True, "experiment paused")
    assert (await api.WatchAllocation(known, metadata=token_of("1.1"))).stop  # differs from what it knows


async def test_watch_answers_at_once_with_a_new_length_or_a_searcher_stop(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    length = events_pb2.TrialLengthSet(trial_id=1, experiment_id=1, rung=1, length=300)
    await append(event_store, gateway, "trial/1", length, "length-1")
    request = api_pb2.WatchAllocationRequest(allocation_id="1.1", timeout_s=50)
    answer = await api.WatchAllocation(request, metadata=token_of("1.1"), timeout=20)
    assert (answer.searcher_length, answer.searcher_stopped) == (300, False)
    stop = events_pb2.TrialStopRequested(
        trial_id=1, experiment_id=1, reason="cut at rung 1 (300 batches)", rung=1
    )
    await append(event_store, gateway, "trial/1", stop, "searcher-stop-1")
    request.searcher_length = 300
    answer = await api.WatchAllocation(request, metadata=token_of("1.1"), timeout=20)
    assert answer.searcher_stopped and not answer.stop
    trial = (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial
    assert (trial.rung, trial.searcher_length, trial.end_reason) == (1, 300, "cut at rung 1 (300 batches)")
    details = await refused(
        api.WatchAllocation(request, metadata=token_of("1.2")), grpc.StatusCode.PERMISSION_DENIED
    )
    assert "1.2, not 1.1" in details


async def test_a_stop_is_acknowledged_once_it_was_requested(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    request = api_pb2.AcknowledgeStopRequest(allocation_id="1.1")
    assert "not asked to stop" in await refused(api.AcknowledgeStop(request, metadata=token_of("1.1")))
    stop = events_pb2.AllocationStopRequested(allocation_id="1.1", task_id="1", reason="paused")
    await event_store.append(Append("allocation/1.1", stop, "stop-1.1"), actor="service:searcher")
    await api.AcknowledgeStop(request, metadata=token_of("1.1"))
    await api.AcknowledgeStop(request, metadata=token_of("1.1"))
    kinds = [e.WhichOneof("payload") for e in await stored(event_store, "allocation")]
    assert kinds == ["allocation_requested", "allocation_stop_requested", "allocation_stop_acknowledged"]


async def test_status_reports_are_stored_once_each(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    for seq, status in [(1, "training"), (1, "training"), (2, "evaluating"), (3, "training")]:
        request = api_pb2.ReportStatusRequest(trial_id=1, status=status, reporter_id="p", seq=seq)
        await api.ReportStatus(request, metadata=token_of("1.1"))
    statuses = [e.trial_status_reported.status for e in await stored(event_store, "trial")][1:]
    assert statuses == ["training", "evaluating", "training"]
    assert await gateway.projector.catch_up()
    assert (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial.status == "training"


async def test_pause_and_activate_a_running_experiment(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    await given_trial(event_store, gateway)
    pause = api_pb2.PauseExperimentRequest(experiment_id=1)
    await api.PauseExperiment(pause)
    await api.PauseExperiment(pause)  # paused already: nothing more
    assert await gateway.projector.catch_up()
    response = await api.GetExperiment(api_pb2.GetExperimentRequest(experiment_id=1))
    assert response.experiment.state == "PAUSED"
    assert [t.state for t in response.trials] == ["ACTIVE"]  # its run is still open
    exited = events_pb2.AllocationExited(allocation_id="1.1", trial_id=1, exit_code=0)
    await append(event_store, gateway, "allocation/1.1", exited, "exited-1.1")
    trials = (await api.GetExperimentTrials(api_pb2.GetExperimentTrialsRequest(experiment_id=1))).trials
    assert [t.state for t in trials] == ["PAUSED"]
    await api.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=1))
    changes = [e.experiment_state_changed for e in await stored(event_store, "experiment")][1:]
    assert [(c.state, c.reason) for c in changes] == [
        (events_pb2.EXPERIMENT_STATE_PAUSED, "paused by a user"),
        (events_pb2.EXPERIMENT_STATE_ACTIVE, "activated by a user"),
    ]
    await api.KillExperiment(api_pb2.KillExperimentRequest(experiment_id=1))
    assert await gateway.projector.catch_up()
    assert "cannot be paused" in await refused(api.PauseExperiment(pause))
    await refused(
        api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=9)), grpc.StatusCode.NOT_FOUND
    )


async def test_kill_a_trial(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await refused(api.KillTrial(api_pb2.KillTrialRequest(trial_id=4)), grpc.StatusCode.NOT_FOUND)
    await given_trial(event_store, gateway, trial_id=4, experiment_id=2)
    await api.KillTrial(api_pb2.KillTrialRequest(trial_id=4))
    await api.KillTrial(api_pb2.KillTrialRequest(trial_id=4))
    ended = events_pb2.TrialEnded(trial_id=4, experiment_id=2, state=events_pb2.TRIAL_STATE_CANCELED)
    await append(event_store, gateway, "trial/4", ended, "ended-4")
    await api.KillTrial(api_pb2.KillTrialRequest(trial_id=4))  # ended: nothing more
    kinds = [e.WhichOneof("payload") for e in await stored(event_store, "trial")]
    assert kinds == ["trial_created", "trial_kill_requested", "trial_ended"]
    [kill] = [
        e.trial_kill_requested
        for e in await stored(event_store, "trial")
        if e.HasField("trial_kill_requested")
    ]
    assert (kill.trial_id, kill.experiment_id) == (4, 2)


async def test_the_best_validation_of_the_experiment(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    await given_trial(event_store, gateway, trial_id=1)
    await given_trial(event_store, gateway, trial_id=2)
    best = api_pb2.GetBestValidationRequest(trial_id=2)
    assert not (await api.GetBestValidation(best, metadata=token_of("2.1"))).found
    for trial_id, loss in [(1, 0.5), (2, 0.7), (1, "NaN")]:
        request = api_pb2.ReportMetricsRequest(trial_id=trial_id, trial_run_id=1, batch_seq=len(str(loss)))
        request.reports.add(group="validation", steps_completed=10, metrics_json=f'{{"loss": {loss}}}')
        await api.ReportMetrics(request, metadata=token_of(f"{trial_id}.1"))
    assert await gateway.projector.catch_up()
    answer = await api.GetBestValidation(best, metadata=token_of("2.1"))
    assert (answer.found, answer.metric) == (True, 0.5)  # smaller is better; "NaN" is no number


async def test_the_cli_pauses_experiments_and_kills_trials(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await api.CreateExperiment(api_pb2.CreateExperimentRequest(config_yaml=CONFIG, activate=True))
    await given_trial(event_store, gateway)

    async def det(*argv: str) -> tuple[int | None, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "determined.cli",
            "-m",
            f"127.0.0.1:{gateway.port}",
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, error = await process.communicate()
        return process.returncode, out.decode(), error.decode()

    assert await det("e", "pause", "1") == (0, "Paused experiment 1\n", "")
    assert await det("t", "kill", "1") == (0, "Killed trial 1\n", "")
    code, _, error = await det("e", "pause", "9")
    assert code == 1 and "experiment 9 not found" in error
    assert await gateway.projector.catch_up()
    code, out, _ = await det("e", "describe", "1", "--json")
    described = json.loads(out)
    assert described["experiment"]["state"] == "PAUSED"
    assert {key: described["trials"][0][key] for key in ("runs", "rung", "total_batches")} == {
        "runs": 1,
        "rung": 0,
        "total_batches": 0,
    }
    code, out, _ = await det("t", "describe", "1")
    assert code == 0 and "Reason" in out.splitlines()[0]
