"""The pure parts of the cluster as it was (features/events/as_of_*.py): the
point a request names, the scratch's statements, the job queue folded from
the log (against the scheduler's own core, all along the golden logs),
and the CLI's --at / --at-seq."""

import argparse
from dataclasses import replace
from typing import Any

import pytest
from support.golden_log import golden_log

from determined.cli import _args
from determined.cli.__main__ import build_parser
from determined.cli._as_of import as_of, print_as_of
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Envelope
from services.common.job_queue import JobView, PublishedQueue
from services.common.scheduling import DEFAULT_WEIGHT, PRIORITY
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.events.as_of_jobs import JobLog
from services.gateway.features.events.as_of_point import asked, check, first_after
from services.gateway.features.events.as_of_schema import in_scratch, scratch_ddl
from services.gateway.schema import tables
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore
from services.scheduler.queue import job_queue

# -- the point ------------------------------------------------------------------------------


def test_a_request_asks_as_of_a_point_when_it_names_one() -> None:
    assert not asked(api_pb2.AsOf())
    assert asked(api_pb2.AsOf(sequence=3)) and asked(api_pb2.AsOf(time_ns=5))


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        (api_pb2.AsOf(sequence=3, time_ns=5), "as of a sequence or a time, not both"),
        (api_pb2.AsOf(sequence=-1), "neither is below 0"),
        (api_pb2.AsOf(time_ns=-1), "neither is below 0"),
        (api_pb2.AsOf(sequence=11), "sequence 11 is past the end of the event log (sequence 10)"),
    ],
)
def test_points_that_are_not_in_the_log_are_refused(as_of: api_pb2.AsOf, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(as_of, 10)
    check(api_pb2.AsOf(sequence=10), 10)
    check(api_pb2.AsOf(time_ns=2**62), 10)


async def first_after_in(times: list[int], time_ns: int) -> int:
    async def occurred(sequence: int) -> int:
        return times[sequence - 1]

    return await first_after(occurred, time_ns, len(times))


async def test_a_time_is_found_by_bisection_over_the_sequence() -> None:
    times = [10, 20, 20, 30, 40]
    assert [await first_after_in(times, t) for t in (5, 10, 19, 20, 29, 30, 40, 99)] == [
        1,
        2,
        2,
        4,
        4,
        5,
        6,
        6,
    ]
    assert await first_after_in([], 7) == 1  # an empty log: nothing is folded


async def test_with_clocks_apart_the_point_is_an_event_by_then_followed_by_one_after() -> None:
    times = [10, 50, 20, 30, 60, 40, 70]  # a writer's clock ahead (50, 60)
    for time_ns in range(0, 80, 5):
        found = await first_after_in(times, time_ns)
        assert found == 1 or times[found - 2] <= time_ns
        assert found == len(times) + 1 or times[found - 1] > time_ns


# -- the scratch ----------------------------------------------------------------------------


def test_statements_name_the_scratch_in_place_of_the_live_schema() -> None:
    assert (
        in_scratch(
            "SELECT * FROM read_model.trials t JOIN read_model.experiments e ON e.id = t.experiment_id"
        )
        == "SELECT * FROM pg_temp.trials t JOIN pg_temp.experiments e ON e.id = t.experiment_id"
    )
    for other in ("read_model_verify_live.trials", "x_read_model.trials", "SELECT $1 AS read_model"):
        assert in_scratch(other) == other


def test_the_scratch_has_every_table_and_no_schema_of_its_own() -> None:
    script = scratch_ddl()
    assert "read_model." not in script and "CREATE SCHEMA" not in script
    for table in tables():
        assert f"CREATE TABLE IF NOT EXISTS pg_temp.{table.name} (" in script


# -- the job queue --------------------------------------------------------------------------


def envelope(event_id: str, occurred_at_ns: int, **payload: Any) -> Envelope:
    return Envelope(event_id=event_id, occurred_at_ns=occurred_at_ns, **payload)


def requested(allocation_id: str, job_id: str, at: int, **fields: Any) -> Envelope:
    event = events_pb2.AllocationRequested(allocation_id=allocation_id, job_id=job_id, task_id="t", **fields)
    return envelope(f"r-{allocation_id}", at, allocation_requested=event)


def assigned(allocation_id: str) -> Envelope:
    return envelope(
        f"a-{allocation_id}",
        0,
        allocation_assigned=events_pb2.AllocationAssigned(allocation_id=allocation_id),
    )


def folded(*events: Envelope, published: PublishedQueue | None = None) -> tuple[list[JobView], list[str]]:
    jobs = JobLog()
    for event in events:
        jobs.fold(event)
    queue, pools = jobs.queue(published or PublishedQueue())
    return list(queue.jobs), pools


def test_a_job_asks_for_its_open_requests_slots_and_holds_its_assigned_ones() -> None:
    views, pools = folded(
        requested("1.1", "experiment/1", 100, slots=2, weight=2.0),
        requested("2.1", "experiment/2", 200, slots=1, priority=10, resource_pool="gpu"),
        requested("1.2", "experiment/1", 300, slots=2),
        assigned("1.1"),
        envelope("g", 0, agent_registered=events_pb2.AgentRegistered(agent_id="g", resource_pool="gpu")),
    )
    assert pools == ["default", "gpu"]
    assert views == [
        JobView("experiment/1", "default", 42, 2.0, 0, 100, 4, 2, "SCHEDULED", 1, ""),
        JobView("experiment/2", "gpu", 10, DEFAULT_WEIGHT, 0, 200, 1, 0, "QUEUED", 1, ""),
    ]


def test_ended_requests_leave_the_queue_and_withdrawn_waiting_ones_ask_for_nothing() -> None:
    stop = events_pb2.AllocationStopRequested(allocation_id="2.1")
    views, _ = folded(
        requested("1.1", "experiment/1", 1, slots=1),
        requested("2.1", "experiment/2", 2, slots=1),
        requested("3.1", "experiment/3", 3, slots=1),
        requested("4.1", "experiment/4", 4, slots=1),
        assigned("4.1"),
        envelope("x", 5, allocation_exited=events_pb2.AllocationExited(allocation_id="1.1")),
        envelope("s", 6, allocation_stop_requested=stop),
        envelope("k", 7, allocation_kill_requested=events_pb2.AllocationKillRequested(allocation_id="3.1")),
        envelope("s4", 8, allocation_stop_requested=events_pb2.AllocationStopRequested(allocation_id="4.1")),
    )
    assert [(v.job_id, v.slots_needed, v.position) for v in views] == [("experiment/4", 1, 1)]
    withdrawn = events_pb2.AllocationStopWithdrawn(allocation_id="2.1", stop_event_id="s")
    views, _ = folded(
        requested("2.1", "experiment/2", 2, slots=1),
        envelope("s", 6, allocation_stop_requested=stop),
        envelope("w", 7, allocation_stop_withdrawn=withdrawn),
    )
    assert [(v.job_id, v.state) for v in views] == [("experiment/2", "QUEUED")]


def test_a_jobs_changes_apply_over_its_requests_and_a_priority_pool_serves_by_priority() -> None:
    change = events_pb2.JobResourcesChanged(job_id="experiment/2", priority=5)
    events = (
        requested("1.1", "experiment/1", 1, slots=1, priority=30),
        requested("2.1", "experiment/2", 2, slots=1, priority=40, max_slots=3),
        envelope("c", 3, job_resources_changed=change),
        envelope(
            "c2", 4, job_resources_changed=events_pb2.JobResourcesChanged(job_id="experiment/2", weight=3.0)
        ),
    )
    views, _ = folded(*events)
    assert [(v.job_id, v.priority, v.weight, v.max_slots, v.position) for v in views] == [
        ("experiment/1", 30, DEFAULT_WEIGHT, 0, 1),
        ("experiment/2", 5, 3.0, 3, 2),
    ]
    views, _ = folded(*events, published=PublishedQueue(default_type=PRIORITY))
    assert [(v.job_id, v.position) for v in views] == [("experiment/2", 1), ("experiment/1", 2)]


@pytest.mark.parametrize("scheduler", ["fair_share", "priority"])
@pytest.mark.parametrize(
    "name", ["three_experiments.jsonl", "adaptive_pause_kill.jsonl", "generated_cluster.jsonl.gz"]
)
def test_the_queue_folded_is_the_schedulers_own_all_along_the_log(name: str, scheduler: str) -> None:
    config = SchedulerConfig(default_type=scheduler)
    published = PublishedQueue(default_type=scheduler)
    core = SchedulerCore(config)
    state = core.initial_state()
    jobs = JobLog()
    log = golden_log(name)
    for index, envelope in enumerate(log, start=1):
        state = core.evolve(state, envelope)
        jobs.fold(envelope)
        if index % 3 and index < len(log):
            continue  # every third point (the scheduler's queue costs a scheduling pass)
        expected = [replace(view, waiting_reason="") for view in job_queue(state, config)]
        assert list(jobs.queue(published)[0].jobs) == expected, envelope.event_id


# -- the CLI --------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_a_time_is_iso_8601_and_utc_unless_it_names_a_zone() -> None:
    assert _args.time_ns("2026-11-22T03:00:00Z") == _args.time_ns("2026-11-22 03:00") == 1795316400 * 10**9
    assert _args.time_ns("2026-11-22T04:00:00+01:00") == 1795316400 * 10**9
    assert _args.time_ns("2026-11-22T03:00:00.000250") == 1795316400 * 10**9 + 250_000
    for bad in ("yesterday", "1969-12-31", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            _args.time_ns(bad)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["experiment", "describe", "1", "--at-seq", "0"], "0 is not a sequence of the event log"),
        (["experiment", "list-trials", "1", "--at-seq", "x"], "'x' is not a sequence of the event log"),
        (["agent", "list", "--at", "noon"], "'noon' is not a time"),
        (["job", "list", "--at", "2026-11-22", "--at-seq", "4"], "not allowed with argument"),
    ],
)
def test_bad_points_are_refused_at_parse_time(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)
    assert message in capsys.readouterr().err


def test_the_point_goes_in_the_request_and_the_answer_names_it_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert as_of(parse("experiment", "describe", "1", "--at-seq", "42")) == api_pb2.AsOf(sequence=42)
    assert as_of(parse("job", "list", "--at", "2026-11-22")) == api_pb2.AsOf(time_ns=1795305600 * 10**9)
    assert as_of(parse("agent", "list")) == api_pb2.AsOf()
    print_as_of(api_pb2.GetAgentsResponse())
    print_as_of(api_pb2.GetAgentsResponse(as_of=api_pb2.AsOf(sequence=42, time_ns=1795305600 * 10**9)))
    assert capsys.readouterr().out == "As of sequence 42 (2026-11-22 00:00:00)\n"
