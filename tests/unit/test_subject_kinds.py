"""One table (SUBJECT_KINDS) says under which aggregate kind each event type
is appended; every core reads the kinds of every event type it folds, or it
would never see them."""

import ast
import inspect
from types import ModuleType

import pytest

from determined.proto import events_pb2
from services.agent import core as agent_core
from services.checkpoint import core as checkpoint_core
from services.common.envelope import SUBJECT_KINDS, Envelope
from services.scheduler import core as scheduler_core
from services.scheduler import state as scheduler_state
from services.searcher import core as searcher_core
from services.searcher import lifecycle, unmanaged

PAYLOAD_FIELDS = {f.message_type.name: f.name for f in Envelope.DESCRIPTOR.oneofs_by_name["payload"].fields}

CORES: list[tuple[ModuleType, tuple[str, ...], list[str]]] = [
    (searcher_core, searcher_core.SEARCHER_FOLDS, searcher_core.SearcherCore().kinds),
    (lifecycle, lifecycle.LIFECYCLE_FOLDS, lifecycle.TrialLifecycleCore().kinds),
    (unmanaged, unmanaged.UNMANAGED_FOLDS, unmanaged.UnmanagedTrialsCore().kinds),
    (scheduler_state, scheduler_core.SCHEDULER_FOLDS, scheduler_core.SchedulerCore().kinds),
    (agent_core, agent_core.AGENT_FOLDS, agent_core.AgentCore("a").kinds),
    (checkpoint_core, checkpoint_core.GC_FOLDS, checkpoint_core.GcCore().kinds),
]


def test_every_event_type_has_a_subject_kind() -> None:
    assert set(SUBJECT_KINDS) == set(PAYLOAD_FIELDS.values())


def folded_event_types(module: ModuleType) -> set[str]:
    """Event types the module's code matches on (`case events_pb2.X()`) or
    tests for (`isinstance(event, events_pb2.X)`)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        cls = node.cls if isinstance(node, ast.MatchClass) else None
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
            cls = node.args[1]
        if isinstance(cls, ast.Attribute) and cls.attr in PAYLOAD_FIELDS:
            names.add(PAYLOAD_FIELDS[cls.attr])
    return names


@pytest.mark.parametrize("module, folds, kinds", CORES, ids=lambda v: getattr(v, "__name__", ""))
def test_each_core_reads_the_kinds_of_the_events_it_folds(
    module: ModuleType, folds: tuple[str, ...], kinds: list[str]
) -> None:
    assert folded_event_types(module) <= set(folds)
    assert {SUBJECT_KINDS[event_type] for event_type in folds} <= set(kinds)


def test_an_appended_event_type_is_named_by_its_subject() -> None:
    assert SUBJECT_KINDS[PAYLOAD_FIELDS[events_pb2.TrialValidationReported.DESCRIPTOR.name]] == "validation"
