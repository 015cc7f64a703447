"""The rest of the Core API at the gateway, against a real nats-server and PostgreSQL: early
exits (once per trial), the trial's metadata (set whole, read back), the fencing of both, and
read models that stay the same when the log is replayed, twice or with every message doubled."""

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import cast

import asyncpg
import grpc
import test_gateway
from google.protobuf.message import Message
from test_gateway import given_trial, stored
from test_gateway_stop_resume import next_run, refused, token_of
from test_rebuild import dump

from determined.proto import api_pb2, api_pb2_grpc, events_pb2
from services.common.envelope import Append
from services.common.eventlog import StoredEvent
from services.common.eventstore import EventStore
from services.gateway.features.parts import Queries
from services.gateway.projector import Projector
from services.gateway.rebuild import rebuild
from services.gateway.schema import create_schema, drop_schema
from services.gateway.server import Gateway

# test_gateway's started gateway (the api fixture on it comes from conftest.py).
gateway = test_gateway.gateway

FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


def early_exit(reason: str, trial_id: int = 1) -> api_pb2.ReportEarlyExitRequest:
    return api_pb2.ReportEarlyExitRequest(trial_id=trial_id, reason=reason)


def set_metadata(text: str, trial_id: int = 1) -> api_pb2.SetTrialMetadataRequest:
    return api_pb2.SetTrialMetadataRequest(trial_id=trial_id, metadata_json=text)


async def trial_events(store: EventStore, kind: str) -> list[Message]:
    events = [e for e in await stored(store, "trial") if e.WhichOneof("payload") == kind]
    return [getattr(e, kind) for e in events]


async def test_an_early_exit_is_stored_once_and_a_second_one_refused(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    bad = await refused(
        api.ReportEarlyExit(early_exit("ERRORED"), metadata=token_of("1.1")), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert "INVALID_HP, USER_REQUESTED_STOP" in bad
    await api.ReportEarlyExit(early_exit("INVALID_HP"), metadata=token_of("1.1"))
    details = await refused(api.ReportEarlyExit(early_exit("USER_REQUESTED_STOP"), metadata=token_of("1.1")))
    assert details == "an early exit of trial 1 was already reported (INVALID_HP)"
    # Two racing reports: one is stored.
    await given_trial(event_store, gateway, trial_id=2)
    racing = [
        api.ReportEarlyExit(early_exit("USER_REQUESTED_STOP", 2), metadata=token_of("2.1")) for _ in range(2)
    ]
    outcomes = await asyncio.gather(*racing, return_exceptions=True)
    assert all(not isinstance(o, Exception) or o.code() == FAILED_PRECONDITION for o in outcomes)
    reported = await trial_events(event_store, "trial_early_exit_reported")
    assert [(e.trial_id, e.experiment_id, e.reason) for e in reported] == [  # type: ignore[attr-defined]
        (1, 1, "INVALID_HP"),
        (2, 1, "USER_REQUESTED_STOP"),
    ]
    [envelope] = [e for e in await stored(event_store, "trial") if e.HasField("trial_early_exit_reported")][
        :1
    ]
    assert (envelope.event_id, envelope.actor) == ("early-exit-1", "trial:1")


async def test_a_trial_that_exited_for_invalid_hyperparameters_says_so(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    await api.ReportEarlyExit(early_exit("INVALID_HP"), metadata=token_of("1.1"))
    ended = events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED)
    await event_store.append(Append("trial/1", ended, "trial-ended-1"), actor="service:searcher")
    assert await gateway.projector.catch_up()
    trial = (await api.GetTrial(api_pb2.GetTrialRequest(trial_id=1))).trial
    assert (trial.state, trial.end_reason) == ("COMPLETED", "invalid hyperparameters")


async def test_metadata_is_set_whole_read_back_and_stored_once_per_change(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    token = token_of("1.1")
    get = api_pb2.GetTrialMetadataRequest(trial_id=1)
    assert (await api.GetTrialMetadata(get, metadata=token)).metadata_json == "{}"
    await api.SetTrialMetadata(set_metadata('{"phase": "train", "lr": [0.1]}'), metadata=token)
    assert (await api.GetTrialMetadata(get, metadata=token)).metadata_json == '{"phase":"train","lr":[0.1]}'
    await api.SetTrialMetadata(set_metadata('{"phase": "train", "lr": [0.1]}'), metadata=token)  # a retry
    await api.SetTrialMetadata(set_metadata('{"phase": "eval"}'), metadata=token)
    await api.SetTrialMetadata(set_metadata('{"phase": "train", "lr": [0.1]}'), metadata=token)
    assert (await api.GetTrialMetadata(get, metadata=token)).metadata_json == '{"phase":"train","lr":[0.1]}'
    sets = await trial_events(event_store, "trial_metadata_set")
    assert [e.metadata_json for e in sets] == [  # type: ignore[attr-defined]
        '{"phase":"train","lr":[0.1]}',
        '{"phase":"eval"}',
        '{"phase":"train","lr":[0.1]}',
    ]
    for text in ("[1]", "nope", '{"a": NaN}'):
        await refused(
            api.SetTrialMetadata(set_metadata(text), metadata=token), grpc.StatusCode.INVALID_ARGUMENT
        )


async def test_only_the_trials_current_open_allocation_may_call(
    api: api_pb2_grpc.DeterminedStub, gateway: Gateway, event_store: EventStore
) -> None:
    await given_trial(event_store, gateway)
    await given_trial(event_store, gateway, trial_id=2)
    await api.SetTrialMetadata(set_metadata('{"run": 1}'), metadata=token_of("1.1"))
    await next_run(event_store, gateway, 1, 2)
    calls = [
        lambda token: api.ReportEarlyExit(early_exit("INVALID_HP"), metadata=token),
        lambda token: api.SetTrialMetadata(set_metadata('{"run": "old"}'), metadata=token),
        lambda token: api.GetTrialMetadata(api_pb2.GetTrialMetadataRequest(trial_id=1), metadata=token),
    ]
    for call in calls:
        assert "is closed (exited)" in await refused(call(token_of("1.1")))
        assert "unknown" in await refused(call(token_of("1.7")))
        assert "not trial 1" in await refused(call(token_of("2.1")), grpc.StatusCode.PERMISSION_DENIED)
        assert "only a trial process" in await refused(call(()), grpc.StatusCode.PERMISSION_DENIED)
    assert await trial_events(event_store, "trial_early_exit_reported") == []
    # The new run reads the trial's metadata and may still report the early exit.
    get = api_pb2.GetTrialMetadataRequest(trial_id=1)
    assert (await api.GetTrialMetadata(get, metadata=token_of("1.2"))).metadata_json == '{"run":1}'
    await api.ReportEarlyExit(early_exit("INVALID_HP"), metadata=token_of("1.2"))


def history() -> list[tuple[str, Message]]:
    """Two trials: one reports two early exits (the first counts) and sets metadata A, B, A
    before it ends COMPLETED; the other only sets metadata once."""
    return [
        ("trial/1", events_pb2.TrialCreated(trial_id=1, experiment_id=1, hparams_json="{}")),
        ("trial/2", events_pb2.TrialCreated(trial_id=2, experiment_id=1, hparams_json="{}")),
        ("trial/1", events_pb2.TrialMetadataSet(trial_id=1, experiment_id=1, metadata_json='{"a":1}')),
        ("trial/1", events_pb2.TrialEarlyExitReported(trial_id=1, experiment_id=1, reason="INVALID_HP")),
        ("trial/2", events_pb2.TrialMetadataSet(trial_id=2, experiment_id=1, metadata_json='{"z":[1,2]}')),
        ("trial/1", events_pb2.TrialMetadataSet(trial_id=1, experiment_id=1, metadata_json='{"b":2}')),
        (
            "trial/1",
            events_pb2.TrialEarlyExitReported(trial_id=1, experiment_id=1, reason="USER_REQUESTED_STOP"),
        ),
        ("trial/1", events_pb2.TrialMetadataSet(trial_id=1, experiment_id=1, metadata_json='{"a":1}')),
        (
            "trial/1",
            events_pb2.TrialEnded(trial_id=1, experiment_id=1, state=events_pb2.TRIAL_STATE_COMPLETED),
        ),
    ]


async def test_replays_and_doubled_messages_give_the_same_rows(
    event_store: EventStore, pool: asyncpg.Pool
) -> None:
    for index, (aggregate_name, payload) in enumerate(history()):
        await event_store.append(Append(aggregate_name, payload, f"h-{index}"), actor="service:test")
    await Projector(event_store, pool).run(follow=False)
    before = await dump(pool, with_position=False)
    queries = Queries(pool)
    trials = await queries.trials.trials(1)
    assert [t.end_reason for t in trials] == ["invalid hyperparameters", ""]
    assert [await queries.trials.trial_metadata(i) for i in (1, 2, 3)] == ['{"a":1}', '{"z":[1,2]}', None]
    assert [await queries.trials.early_exit_reason(i) for i in (1, 2)] == ["INVALID_HP", None]

    assert await rebuild(event_store, pool) == len(history())
    assert await dump(pool, with_position=False) == before

    async with pool.acquire() as connection:
        await drop_schema(connection)
        await create_schema(connection)
    projector = Projector(event_store, pool)
    events = await _read_all(event_store)
    doubled = [StoredEvent(2 * e.sequence - copy, e.envelope, False) for e in events for copy in (1, 0)]
    for start in range(0, len(doubled), 3):
        await projector.apply(doubled[start : start + 3])
    assert await dump(pool, with_position=False) == before


async def _read_all(store: EventStore) -> list[StoredEvent]:
    last = await store.last_sequence()
    events = []
    async with contextlib.aclosing(cast(AsyncGenerator[StoredEvent, None], store.read(None))) as stream:
        async for event in stream:
            events.append(event)
            if event.sequence >= last:
                break
    return events
