"""The pure parts of det events: a filter's checks and types, the test each
event passes, what a user who is not an admin may see, and where `since` starts."""

import pytest

from determined.proto import api_pb2, events_pb2
from services.common.envelope import Envelope
from services.common.eventlog import first_occurred_at
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events.filters import (
    CLOCK_SLACK_NS,
    MAX_NAME_CHARS,
    EventMatch,
    checked,
    event_types,
    kinds_of_types,
    named_scopes,
)
from services.gateway.features.events.queries import Owned
from services.gateway.features.events.scope import Visibility


def envelope(aggregate: str, actor: str = "service:searcher", at: int = 100, **payload: object) -> Envelope:
    wrapped = Envelope(aggregate=aggregate, actor=actor, occurred_at_ns=at)
    field, value = next(iter(payload.items()))
    getattr(wrapped, field).CopyFrom(value)
    return wrapped


def test_types_by_field_or_message_name_and_their_kinds() -> None:
    types = event_types(["TrialStopRequested", "allocation_exited", "TrialMetricsReported"])
    assert types == {"trial_stop_requested", "allocation_exited", "trial_metrics_reported"}
    assert kinds_of_types(types) == ["allocation", "metrics", "trial"]
    assert kinds_of_types(frozenset()) is None
    with pytest.raises(InvalidArgumentError, match="'TrialStoped' is no event type"):
        event_types(["TrialCreated", "TrialStoped"])


def test_inputs_are_bounded_before_use() -> None:
    with pytest.raises(InvalidArgumentError, match="at most"):
        checked(api_pb2.EventFilter(types=["TrialCreated"] * 1000))
    with pytest.raises(InvalidArgumentError, match="user is longer"):
        checked(api_pb2.EventFilter(user="x" * (MAX_NAME_CHARS + 1)))
    with pytest.raises(InvalidArgumentError, match="from_sequence must be 0 or more"):
        checked(api_pb2.EventFilter(from_sequence=-1))
    checked(api_pb2.EventFilter(trial_id=7, types=["TrialCreated"], user="alice"))


def test_what_a_filter_names() -> None:
    named = named_scopes(api_pb2.EventFilter(experiment_id=3, allocation_id="7.1", task_id="t"))
    assert named == [("experiment", "3"), ("allocation", "7.1"), ("task", "t")]
    assert named_scopes(api_pb2.EventFilter(user="alice")) == []


def test_an_event_matches_its_type_user_and_times() -> None:
    stop = envelope(
        "trial/7", "user:alice", 100, trial_stop_requested=events_pb2.TrialStopRequested(trial_id=7)
    )
    event_filter = api_pb2.EventFilter(types=["TrialStopRequested"], user="alice", since_ns=100, until_ns=200)
    match = EventMatch.of(event_filter, None)
    assert match.keeps(stop)
    assert not EventMatch.of(api_pb2.EventFilter(user="bob"), None).keeps(stop)
    assert not EventMatch.of(api_pb2.EventFilter(types=["TrialCreated"]), None).keeps(stop)
    assert not EventMatch.of(api_pb2.EventFilter(since_ns=101), None).keeps(stop)
    assert not EventMatch.of(api_pb2.EventFilter(until_ns=99), None).keeps(stop)
    assert not match.past_the_end(stop)
    stop.occurred_at_ns = 200 + CLOCK_SLACK_NS + 1
    assert match.past_the_end(stop) and not EventMatch.of(api_pb2.EventFilter(), None).past_the_end(stop)
    assert EventMatch.of(api_pb2.EventFilter(), None).keeps(Envelope())  # unreadable: shown to admins


def test_what_a_user_who_is_not_an_admin_sees() -> None:
    alice = Visibility("alice", 3, Owned(frozenset({2}), frozenset({7}), frozenset({"t-1"})))
    checkpoint = events_pb2.CheckpointReported(uuid="u", experiment_id=2)
    other_checkpoint = events_pb2.CheckpointReported(uuid="v", experiment_id=1)
    seen = [
        envelope("experiment/2", experiment_state_changed=events_pb2.ExperimentStateChanged()),
        envelope("trial/7", trial_created=events_pb2.TrialCreated()),
        envelope("metrics/7", trial_metrics_reported=events_pb2.TrialMetricsReported()),
        envelope("allocation/7.2", allocation_exited=events_pb2.AllocationExited()),
        envelope("allocation/t-1.1", allocation_exited=events_pb2.AllocationExited()),
        envelope("checkpoint/u", checkpoint_reported=checkpoint),
        envelope("user/3", "address:10.0.0.1", user_login_failed=events_pb2.UserLoginFailed()),
        envelope(
            "experiment/1", "user:alice", experiment_kill_requested=events_pb2.ExperimentKillRequested()
        ),
    ]
    unseen = [
        envelope("experiment/1", experiment_state_changed=events_pb2.ExperimentStateChanged()),
        envelope("trial/17", trial_created=events_pb2.TrialCreated()),
        envelope("allocation/17.1", allocation_exited=events_pb2.AllocationExited()),
        envelope("allocation/t-2.1", allocation_exited=events_pb2.AllocationExited()),
        envelope("checkpoint/v", checkpoint_reported=other_checkpoint),
        envelope("user/4", "user:admin", user_created=events_pb2.UserCreated()),
        envelope("agent/a1", "user:admin", agent_disabled=events_pb2.AgentDisabled()),
        envelope("model/m", "user:bob", model_created=events_pb2.ModelCreated()),
        Envelope(),
    ]
    assert [alice.covers(e) for e in seen] == [True] * len(seen)
    assert [alice.covers(e) for e in unseen] == [False] * len(unseen)


@pytest.mark.parametrize(
    ("times", "since", "first"),
    [
        ([], 5, 1),
        ([10, 20, 30, 40], 5, 1),
        ([10, 20, 30, 40], 20, 2),
        ([10, 20, 30, 40], 21, 3),
        ([10, 20, 30, 40], 41, 5),
        ([10, 0, 30, 40], 25, 3),  # an unreadable event (0) is before any time
    ],
)
async def test_since_starts_at_the_first_event_of_that_time(times: list[int], since: int, first: int) -> None:
    async def occurred_at(sequence: int) -> int:
        return times[sequence - 1]

    assert await first_occurred_at(occurred_at, len(times), since) == first
