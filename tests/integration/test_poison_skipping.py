"""Poison events against a real nats-server (and PostgreSQL): bytes that are
no event, an event of no known type, a known type with impossible content, an
event about another aggregate than its subject, a huge payload, published
straight to JetStream as a holder of a part's password could. Every service
core's shell and the projector log, count and skip each, and apply what
follows (services/common/wellformed.py, skips.py)."""

import asyncio
import json
import time
from pathlib import Path

import asyncpg
import pytest
from test_services_flow import DEADLINE_S, config, create_experiment, experiment_ended, payloads, wait_for

from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.checkpoint.__main__ import CheckpointSettings
from services.checkpoint.__main__ import run as run_checkpoint
from services.common.decider import PureCore, Shell
from services.common.envelope import Append, Envelope, payload_of, subject_for, wrap
from services.common.eventlog import RefusedEventError
from services.common.eventstore import EventStore
from services.common.skips import read_report
from services.gateway import projector as projector_module
from services.gateway.projector import Projector
from services.gateway.read_models import SCHEMA
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler
from services.searcher.__main__ import SearcherSettings
from services.searcher.__main__ import run as run_searcher

ES = ev.ExperimentState


def envelope_bytes(aggregate: str, payload: object, event_id: str) -> bytes:
    append = Append(aggregate, payload, event_id)  # type: ignore[arg-type]
    return wrap(append, actor="mallory", occurred_at_ns=time.time_ns()).SerializeToString()


async def publish(store: EventStore, aggregate: str, data: bytes) -> int:
    """Stores `data` on the aggregate's subject as is, bypassing every check of ours."""
    ack = await store.js.publish(subject_for(store.namespace, aggregate), data, stream=store.events_stream)
    return ack.seq


async def publish_poison(store: EventStore) -> dict[str, int]:
    """One of each kind of poison; name -> its sequence."""
    unknown_type = b"\xba\x3e\x00" + Envelope(event_id="u-1", aggregate="trial/5").SerializeToString()
    huge = b"\x0a" + b"\xff" * (store.nc.max_payload - 1024)
    return {
        "undecodable": await publish(store, "allocation/x", b"\xff\x00 not protobuf"),
        "braces": await publish(store, "experiment/99", b"{}"),
        "unknown type": await publish(store, "trial/5", unknown_type),
        "huge": await publish(store, "agent/x", huge),
        "wrong kind": await publish(
            store,
            "allocation/9.1",
            envelope_bytes("allocation/9.1", ev.ExperimentKillRequested(experiment_id=9), "k"),
        ),
        "impossible allocation": await publish(
            store,
            "allocation/77.1",
            envelope_bytes("allocation/77.1", ev.AllocationExited(allocation_id="77.1"), "x"),
        ),
        "impossible agent": await publish(
            store, "agent/ghost", envelope_bytes("agent/ghost", ev.AgentLost(agent_id="ghost"), "l")
        ),
        "impossible trial": await publish(
            store, "trial/55", envelope_bytes("trial/55", ev.TrialEnded(trial_id=55, experiment_id=55), "t")
        ),
        "no payload": await publish(
            store, "experiment/98", Envelope(event_id="n", aggregate="experiment/98").SerializeToString()
        ),
    }


async def until(condition: "object", what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_services_skip_poison_and_run_an_experiment_after_it(
    event_store: EventStore, nats_url: str, namespace: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    common = {"nats_url": nats_url, "namespace": namespace, "cluster_secret": "test-secret"}
    poison = await publish_poison(event_store)
    go = tmp_path / "go"
    parts = {
        "searcher": run_searcher(SearcherSettings(**common, ready_file=run / "searcher.ready")),
        "scheduler": run_scheduler(SchedulerSettings(**common, ready_file=run / "scheduler.ready")),
        "checkpoint": run_checkpoint(CheckpointSettings(**common, ready_file=run / "checkpoint.ready")),
        "agent": run_agent(
            AgentSettings(
                **common, agent_id="agent-1", agent_work_dir=tmp_path / "work", ready_file=run / "agent.ready"
            )
        ),
    }
    tasks = {name: asyncio.create_task(running) for name, running in parts.items()}
    try:
        await until(lambda: all((run / f"{part}.ready").exists() for part in parts), "every part to be ready")
        await create_experiment(event_store, 1, config(f"while [ ! -f {go} ]; do sleep 0.05; done"))
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        # A kill of experiment 1 stored on its allocation's subject: what the agent's user may publish.
        spoofed = await publish(
            event_store,
            "allocation/1.1",
            envelope_bytes("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "s"),
        )
        more = await publish(event_store, "allocation/1.1", b"\x08garbage after")
        go.touch()
        envelopes = await wait_for(event_store, experiment_ended)
        assert not any(task.done() for task in tasks.values()), "a part stopped"
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    reports = {part: read_report(run / f"{part}.events.json") or {} for part in parts}
    skipped = {
        part: {entry["sequence"] for entry in report.get("skipped", [])} for part, report in reports.items()
    }
    everywhere = {poison["braces"], poison["no payload"]}  # experiment subjects: every service reads them
    assert (
        everywhere <= skipped["searcher"]
        and everywhere <= skipped["scheduler"]
        and everywhere <= skipped["checkpoint"]
    )
    for part in ("searcher", "scheduler", "agent"):
        assert {poison["undecodable"], poison["wrong kind"], spoofed, more} <= skipped[part], part
    assert poison["huge"] in skipped["scheduler"] and poison["huge"] in skipped["agent"]
    undecodable = next(e for e in reports["agent"]["skipped"] if e["sequence"] == poison["undecodable"])
    assert (
        undecodable["subject"] == f"{namespace}.events.allocation.x"
        and "not an event envelope" in undecodable["reason"]
    )


def raising_core() -> PureCore[frozenset[int]]:
    """Experiments: 13 cannot be folded, 14 cannot be decided on; every other
    one gets a trial."""

    def evolve(state: frozenset[int], envelope: Envelope) -> frozenset[int]:
        event = payload_of(envelope)
        if isinstance(event, ev.ExperimentCreated):
            if event.experiment_id == 13:
                raise KeyError(13)
            return state | {event.experiment_id}
        if isinstance(event, ev.TrialCreated):
            return state - {event.experiment_id}
        return state

    def decide(state: frozenset[int]) -> list[Append]:
        if 14 in state:
            raise ValueError("no trial for 14")
        return [
            Append(f"trial/{e}", ev.TrialCreated(trial_id=e, experiment_id=e), f"t-{e}")
            for e in sorted(state)
        ]

    return PureCore(("experiment_created", "trial_created"), frozenset, evolve, decide)


async def test_a_shell_skips_what_its_core_cannot_fold_or_decide_on(event_store: EventStore) -> None:
    ready = asyncio.Event()

    async def caught_up() -> None:
        ready.set()

    shell = asyncio.create_task(
        Shell(event_store, raising_core(), "service:test", on_caught_up=caught_up).run()
    )
    try:
        await ready.wait()
        sequences = {}
        for experiment_id in (13, 14, 15):
            created = Append(
                f"experiment/{experiment_id}",
                ev.ExperimentCreated(experiment_id=experiment_id),
                f"c-{experiment_id}",
            )
            sequences[experiment_id], _ = await event_store.append(created, actor="user:test")
        await until(lambda: len(event_store.skips.latest) == 2, "two skips")
        trials = []
        deadline = time.monotonic() + DEADLINE_S
        while not trials and time.monotonic() < deadline:
            trials = [s.envelope.event_id async for s in event_store.read(["trial"], follow=False)]
            await asyncio.sleep(0.05)
        assert not shell.done()
    finally:
        shell.cancel()
        await asyncio.gather(shell, return_exceptions=True)
    assert trials == ["t-15"]
    reasons = {s.sequence: s.reason for s in event_store.skips.latest}
    assert "cannot fold it: KeyError" in reasons[sequences[13]]
    assert "cannot decide on it: ValueError: no trial for 14" in reasons[sequences[14]]


async def test_appends_of_malformed_or_foreign_events_are_refused(nats_url: str, namespace: str) -> None:
    store = await EventStore.connect(nats_url, namespace, appends=frozenset({"allocation_started"}))
    try:
        with pytest.raises(RefusedEventError, match="not an event this part appends"):
            await store.append(
                Append("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "k"), actor="agent"
            )
        with pytest.raises(RefusedEventError, match="names 2.1 id"):
            await store.append(
                Append("allocation/1.1", ev.AllocationStarted(allocation_id="2.1"), "s"), actor="agent"
            )
        await store.append(
            Append("allocation/1.1", ev.AllocationStarted(allocation_id="1.1"), "s"), actor="agent"
        )
        assert await store.last_sequence() == 1  # nothing of the refused ones was stored
    finally:
        await store.close()


async def experiment_names(pool: asyncpg.Pool) -> list[str]:
    return [r["name"] for r in await pool.fetch(f"SELECT name FROM {SCHEMA}.experiments ORDER BY id")]


@pytest.mark.parametrize("helper", [False, True], ids=["in-process", "replay-helper"])
async def test_the_projector_skips_poison_and_applies_what_follows(
    event_store: EventStore, pool: asyncpg.Pool, helper: bool
) -> None:
    async def created(experiment_id: int, name: str, config_json: str = "{}") -> int:
        payload = ev.ExperimentCreated(experiment_id=experiment_id, name=name, config_json=config_json)
        return await publish(
            event_store,
            f"experiment/{experiment_id}",
            envelope_bytes(f"experiment/{experiment_id}", payload, f"c{experiment_id}"),
        )

    await created(1, "before")
    poison = await publish_poison(event_store)
    unplannable = await created(2, "bad config", json.dumps({"searcher": "not a mapping"}))
    unwritable = await created(3, "nul \x00 in a name")  # PostgreSQL's text takes no NUL
    huge_name = "h" * (event_store.nc.max_payload - 64 * 1024)  # well-formed, as large as can be stored
    await created(5, huge_name)
    await created(4, "after")
    projector = Projector(event_store, pool, helper_min_events=1 if helper else 10**9)
    await projector.run(follow=False)
    assert [name for name in await experiment_names(pool) if name != huge_name] == ["before", "after"]
    assert projector.position == await event_store.last_sequence()
    skipped = {s.sequence: s.reason for s in event_store.skips.latest}
    assert {poison["undecodable"], poison["braces"], poison["huge"], unplannable, unwritable} <= set(skipped)
    assert "the projection cannot apply it: AttributeError" in skipped[unplannable]
    assert "its rows cannot be written" in skipped[unwritable] or "cannot apply it" in skipped[unwritable]
    typed = f"SELECT sequence FROM {SCHEMA}.event_types WHERE event_type = 'experiment_created'"
    indexed = {row[0] for row in await pool.fetch(typed)}
    assert {unplannable, unwritable} <= indexed  # in the log all the same: det events --type finds them
    await projector.look_at_log()
    assert projector.progress()["state"] == "caught up"


async def test_a_projector_behind_the_log_that_does_not_move_is_said_stuck(
    event_store: EventStore, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    await publish(
        event_store,
        "experiment/1",
        envelope_bytes("experiment/1", ev.ExperimentCreated(experiment_id=1), "c"),
    )
    projector = Projector(event_store, pool)  # not running: it never moves
    await projector.look_at_log()
    assert projector.progress() == {"applied": 0, "log_last": 1, "behind": 1, "state": "behind"}
    monkeypatch.setattr(projector_module, "STUCK_S", -1.0)  # not moving for longer than that
    assert projector.progress()["state"] == "stuck"
    await projector.run(follow=False)
    await projector.look_at_log()
    assert projector.progress()["state"] == "caught up"


async def test_the_newest_event_of_an_aggregate_is_checked_as_every_read_is(event_store: EventStore) -> None:
    created = Append("experiment/1", ev.ExperimentCreated(experiment_id=1), "c")
    sequence, _ = await event_store.append(created, actor="user:test")
    newest = await event_store.last_event("experiment/1")
    assert newest is not None and newest.sequence == sequence
    assert newest.envelope.experiment_created.experiment_id == 1 and not newest.skipped
    poison = await publish(event_store, "experiment/1", b"\xff")
    newest = await event_store.last_event("experiment/1")
    assert newest is not None and (newest.sequence, newest.skipped) == (
        poison,
        "not an event envelope (DecodeError)",
    )
    assert event_store.skips.latest[-1].subject == subject_for(event_store.namespace, "experiment/1")
