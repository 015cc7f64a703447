"""A pause quickly followed by an activation leaves the running trial running.

The whole path, in process against a real nats-server and PostgreSQL: the
gateway (PauseExperiment, ActivateExperiment, WatchAllocation,
AcknowledgeStop), the searcher's lifecycle, the scheduler, an agent, and a real
trial process that asks should_preempt() only once the test lets it: by then
the pause's stop was withdrawn, so the trial trains on in its first run and
completes, and the agent's grace period (shorter than the wait) never kills it.
"""

import asyncio
import textwrap
from pathlib import Path

import test_gateway
from test_services_flow import cluster, payloads, wait_for

from determined.common.context import pack_context
from determined.proto import api_pb2, api_pb2_grpc
from determined.proto import events_pb2 as ev
from services.common.eventstore import EventStore
from services.gateway.server import Gateway

gateway = test_gateway.gateway

STOP_GRACE_S = 1.0

TRAIN_PY = textwrap.dedent(
    """
    import pathlib
    import time

    import determined as det

    go = pathlib.Path({go!r})
    with det.core.init() as core_context:
        core_context.train.report_training_metrics(steps_completed=1, metrics={{"loss": 1.0}})
        while not go.exists():
            time.sleep(0.05)
        if core_context.preempt.should_preempt():
            print("preempted", flush=True)
        else:
            core_context.train.report_training_metrics(steps_completed=2, metrics={{"loss": 0.5}})
    """
)

CONFIG = """
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: {batches: 2}}
resources: {slots_per_trial: 1}
max_restarts: 0
"""


async def test_a_trial_keeps_running_through_a_quick_pause_and_activation(
    api: api_pb2_grpc.DeterminedStub,
    gateway: Gateway,
    event_store: EventStore,
    settings: dict[str, object],
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(TRAIN_PY.format(go=str(go)))
    agent = {
        "master_address": f"127.0.0.1:{gateway.port}",
        "agent_stop_grace_s": STOP_GRACE_S,
        "agent_gpus": False,
    }
    async with cluster(settings, tmp_path / "work", **agent):
        create = api_pb2.CreateExperimentRequest(
            config_yaml=CONFIG, context_tgz=pack_context(context), activate=True
        )
        await api.CreateExperiment(create)
        await wait_for(event_store, lambda es: bool(payloads(es, ev.TrialMetricsReported)))

        await api.PauseExperiment(api_pb2.PauseExperimentRequest(experiment_id=1))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStopRequested)))
        await gateway.projector.catch_up()  # the gateway knows the experiment paused
        await api.ActivateExperiment(api_pb2.ActivateExperimentRequest(experiment_id=1))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStopWithdrawn)))
        await asyncio.sleep(2 * STOP_GRACE_S)  # an agent that kept the stop's grace period kills it now

        go.touch()
        envelopes = await wait_for(event_store, lambda es: bool(payloads(es, ev.TrialEnded)))
    [withdrawn] = payloads(envelopes, ev.AllocationStopWithdrawn)
    assert (withdrawn.allocation_id, withdrawn.stop_event_id) == ("1.1", "allocation-stop-1.1")
    assert [r.allocation_id for r in payloads(envelopes, ev.AllocationRequested)] == ["1.1"]
    assert payloads(envelopes, ev.AllocationStopAcknowledged) == []
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert (exited.exit_code, exited.killed) == (0, False)
    [ended] = payloads(envelopes, ev.TrialEnded)
    assert ended.state == ev.TrialState.TRIAL_STATE_COMPLETED
    steps = [r.steps_completed for m in payloads(envelopes, ev.TrialMetricsReported) for r in m.reports]
    assert steps == [1, 2]
