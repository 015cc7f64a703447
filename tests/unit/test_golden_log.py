"""A recorded log replays against today's cores, and they agree that nothing
is left to decide: no trial to create, no slot to assign, no exit to close."""

import pytest
from golden_log import golden_log

from services.agent.core import AgentCore
from services.common.decider import Core
from services.scheduler.core import SchedulerCore
from services.searcher.core import SearcherCore


@pytest.mark.parametrize("core", [SearcherCore(), SchedulerCore(), AgentCore(agent_id="vm")], ids=lambda core: type(core).__name__)
def test_a_settled_log_leaves_nothing_to_decide(core: Core[object]) -> None:
    state = core.initial_state()
    for envelope in golden_log("three_experiments.jsonl"):
        assert envelope.WhichOneof("payload") is not None, envelope.event_id
        state = core.evolve(state, envelope)
    assert core.decide(state) == []


def test_every_decision_of_a_service_names_its_cause() -> None:
    log = golden_log("three_experiments.jsonl")
    known = {envelope.event_id for envelope in log}
    for envelope in log:
        if envelope.actor.startswith("service:") and envelope.WhichOneof("payload") != "agent_registered":
            assert envelope.causation_id in known, envelope.event_id
