"""The index by event type (services/gateway/features/events/type_index.py),
pure: which reads use it, which events it holds, what a batch writes."""

import pytest

from determined.proto import events_pb2 as ev
from services.common.envelope import Envelope
from services.common.eventlog import StoredEvent
from services.gateway.features.events import type_index
from services.gateway.features.events.filters import EVENT_TYPES
from services.gateway.plan import Plan
from services.gateway.planning import planned_readable

EVERY_TYPE = sorted(set(EVENT_TYPES.values()))


def stored(sequence: int, **payload: object) -> StoredEvent:
    return StoredEvent(sequence, Envelope(aggregate="x", **payload), False)  # type: ignore[arg-type]


def test_every_event_type_but_the_high_volume_ones_is_indexed() -> None:
    assert set(EVERY_TYPE) >= type_index.HIGH_VOLUME
    assert set(EVERY_TYPE) - type_index.HIGH_VOLUME == type_index.INDEXED


@pytest.mark.parametrize("event_type", EVERY_TYPE)
def test_a_read_of_one_type_uses_the_index_unless_it_is_a_per_step_report(event_type: str) -> None:
    indexed = event_type not in type_index.HIGH_VOLUME
    assert type_index.uses_index(frozenset({event_type}), None) is indexed
    assert type_index.uses_index(frozenset({event_type, "trial_stop_requested"}), None) is indexed


def test_a_read_that_names_no_type_or_an_aggregate_does_not_use_it() -> None:
    assert not type_index.uses_index(frozenset(), None)
    assert not type_index.uses_index(frozenset({"trial_stop_requested"}), ["trial/7"])
    assert not type_index.uses_index(frozenset({"trial_stop_requested"}), [])


def test_rows_leave_out_the_per_step_reports_and_what_could_not_be_read() -> None:
    events = [
        stored(1, trial_stop_requested=ev.TrialStopRequested(trial_id=7)),
        stored(2, trial_metrics_reported=ev.TrialMetricsReported(trial_id=7)),
        stored(3, trial_progress_reported=ev.TrialProgressReported(trial_id=7)),
        StoredEvent(4, Envelope(), False, skipped="not an event envelope"),
        stored(5, user_login_failed=ev.UserLoginFailed(username="alice")),
    ]
    assert type_index.rows(events) == [(1, "trial_stop_requested"), (5, "user_login_failed")]


def test_a_batch_writes_its_rows_in_one_statement() -> None:
    assert type_index.statements(Plan()) == []
    [(sql, runs)] = type_index.statements(Plan(event_types=[(1, "trial_created"), (5, "trial_ended")]))
    assert "ON CONFLICT DO NOTHING" in sql
    assert runs == [(["trial_created", "trial_ended"], [1, 5])]


def test_the_plan_of_a_batch_holds_its_rows_also_of_an_event_the_projection_cannot_plan() -> None:
    unplannable = ev.ExperimentCreated(experiment_id=3, config_json='{"searcher": "not a mapping"}')
    events = [
        stored(1, trial_stop_requested=ev.TrialStopRequested(trial_id=7)),
        stored(2, experiment_created=unplannable),
        stored(3, trial_progress_reported=ev.TrialProgressReported(trial_id=7)),
    ]
    plan, left_out = planned_readable(events)
    assert [index for index, _ in left_out] == [1]
    assert plan.event_types == [(1, "trial_stop_requested"), (2, "experiment_created")]


def test_a_fold_into_a_scratch_plans_no_rows() -> None:
    """`--at-seq` folds the log's past into a scratch (as_of_schema.py), which never reads the index."""
    stop = stored(1, trial_stop_requested=ev.TrialStopRequested(trial_id=7))
    assert planned_readable([stop], index_types=False)[0].event_types == []
