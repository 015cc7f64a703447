"""Agents against a real nats-server, without a scheduler (the test appends
what the scheduler would): an allocation placed on two agents, each running
its own part; an allocation the log closes under a running part; a run
declared lost that kills what it runs and registers again."""

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from test_services_flow import payloads, trial_logs, wait_for

from determined.common.ports import allocation_ports
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.common.envelope import Append, Envelope, aggregate
from services.common.eventstore import EventStore
from services.common.heartbeats import Heartbeat, heartbeat_subject
from services.common.processes import process_alive, read_process_record

DEADLINE_S = 30.0
ACTOR = "service:scheduler"


@asynccontextmanager
async def agents(settings: dict[str, object], work_dir: Path, *agent_ids: str) -> AsyncIterator[None]:
    """Runs the agents (one CPU slot each, addresses 10.0.0.<n>) until the block ends."""
    tasks = [
        asyncio.create_task(
            run_agent(
                AgentSettings(
                    **settings,
                    agent_id=agent_id,
                    agent_work_dir=work_dir / agent_id,
                    agent_gpus=False,
                    agent_cpu_slots=2,
                    agent_kill_grace_s=2,
                    agent_address=f"10.0.0.{n}",
                    agent_heartbeat_s=0.2,
                )
            )
        )
        for n, agent_id in enumerate(agent_ids, start=1)
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def place(store: EventStore, allocation_id: str, entrypoint: str, *agent_ids: str) -> None:
    """Requests a trial's allocation and assigns it slots 0 and 1 of each agent, in this order."""
    task_id = allocation_id.split(".")[0]
    launch = ev.TrialLaunch(
        experiment_id=1,
        trial_id=int(task_id),
        trial_run_id=1,
        config_json=json.dumps({"entrypoint": entrypoint}),
    )
    requested = ev.AllocationRequested(
        allocation_id=allocation_id,
        task_id=task_id,
        task_type="TRIAL",
        slots=2 * len(agent_ids),
        trial=launch,
    )
    placements = [
        ev.Placement(agent_id=agent_id, slot_ids=[0, 1], address=f"10.0.0.{n}")
        for n, agent_id in enumerate(agent_ids, start=1)
    ]
    assigned = ev.AllocationAssigned(allocation_id=allocation_id, task_id=task_id, placements=placements)
    for payload, kind in ((requested, "requested"), (assigned, "assigned")):
        append = Append(aggregate("allocation", allocation_id), payload, f"allocation-{kind}-{allocation_id}")
        await store.append(append, actor=ACTOR)


def registrations(count: int) -> Callable[[list[Envelope]], bool]:
    return lambda envelopes: len(payloads(envelopes, ev.AgentRegistered)) >= count


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def pids_of(work_dir: Path, *agent_ids: str, allocation_id: str = "1.1") -> list[int]:
    """The pids of the parts' processes, from their process records."""
    paths = [work_dir / a / allocation_id / "process.json" for a in agent_ids]
    records = [read_process_record(path) for path in paths if path.exists()]
    return [r.pid for r in records if r is not None]


async def test_each_agent_runs_its_part_of_a_gang_and_reports_its_end(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    script = (
        'echo "[rank=$DET_CONTAINER_RANK] $DET_SLOT_IDS $DET_CONTAINER_ADDRS $DET_CONTAINER_SLOT_COUNTS '
        '$DET_CHIEF_IP $C10D_PORT $INTER_TRAIN_PROCESS_COMM_PORT_1 $INTER_TRAIN_PROCESS_COMM_PORT_2"; '
        "exit $((DET_CONTAINER_RANK * 3))"
    )
    async with agents(settings, tmp_path, "a", "b"):
        await wait_for(event_store, registrations(2))
        await place(event_store, "1.1", script, "a", "b")
        envelopes = await wait_for(
            event_store, lambda es: len(payloads(es, ev.AllocationResourcesExited)) == 2
        )
        batches = await trial_logs(event_store, 1, allocations=2)
    ends = sorted(payloads(envelopes, ev.AllocationResourcesExited), key=lambda x: x.agent_id)
    assert [(x.agent_id, x.exit_code, x.killed, x.error, x.trial_id) for x in ends] == [
        ("a", 0, False, "", 1),
        ("b", 3, False, "", 1),
    ]
    ids = {e.event_id for e in envelopes if e.WhichOneof("payload") == "allocation_resources_exited"}
    assert ids == {"allocation-resources-exited-1.1-a", "allocation-resources-exited-1.1-b"}
    assert payloads(envelopes, ev.AllocationExited) == []  # the scheduler closes a gang
    # The two agents start together: either may register first.
    [registered_a, registered_b] = sorted(payloads(envelopes, ev.AgentRegistered), key=lambda x: x.agent_id)
    assert (registered_a.resource_pool, registered_b.address) == ("default", "10.0.0.2")
    ports = " ".join(map(str, allocation_ports("1.1", str(settings["cluster_id"]))))
    lines = {(line.rank, line.log) for b in batches for line in b.lines}
    assert lines == {
        (0, f'[0, 1] ["10.0.0.1", "10.0.0.2"] [2, 2] 10.0.0.1 {ports}'),
        (1, f'[0, 1] ["10.0.0.1", "10.0.0.2"] [2, 2] 10.0.0.1 {ports}'),
    }
    assert {b.agent_id for b in batches if b.allocation_ended} == {"a", "b"}


async def test_a_gang_closed_in_the_log_is_killed_without_another_end(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    """The scheduler closed the allocation (another agent of it was lost, say):
    what runs of it here is killed, and nothing more is appended about it."""
    async with agents(settings, tmp_path, "a", "b"):
        await wait_for(event_store, registrations(2))
        await place(event_store, "1.1", "exec sleep 300", "a", "b")
        await until(lambda: len(pids_of(tmp_path, "a", "b")) == 2, "both parts to start")
        pids = pids_of(tmp_path, "a", "b")
        closed = ev.AllocationExited(
            allocation_id="1.1", task_id="1", trial_id=1, exit_code=-1, agent_lost=True
        )
        await event_store.append(
            Append(aggregate("allocation", "1.1"), closed, "allocation-exited-1.1"), actor=ACTOR
        )
        await until(lambda: not any(map(process_alive, pids)), "both parts to be killed")
        await trial_logs(event_store, 1, allocations=2)  # both parts shipped their output, and ended
        await place(event_store, "2.1", "true", "a")  # a later event: each agent folded what came before
        envelopes = await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationExited)[1:]))
    assert payloads(envelopes, ev.AllocationResourcesExited) == []
    assert [(x.allocation_id, x.exit_code) for x in payloads(envelopes, ev.AllocationExited)] == [
        ("1.1", -1),
        ("2.1", 0),
    ]


async def test_a_kill_request_kills_every_part_of_a_gang(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    async with agents(settings, tmp_path, "a", "b"):
        await wait_for(event_store, registrations(2))
        await place(event_store, "1.1", "exec sleep 300", "a", "b")
        await until(lambda: len(pids_of(tmp_path, "a", "b")) == 2, "both parts to start")
        kill = ev.AllocationKillRequested(allocation_id="1.1", task_id="1", trial_id=1, reason="gang")
        await event_store.append(
            Append(aggregate("allocation", "1.1"), kill, "allocation-kill-1.1"), actor=ACTOR
        )
        envelopes = await wait_for(
            event_store, lambda es: len(payloads(es, ev.AllocationResourcesExited)) == 2
        )
    ends = payloads(envelopes, ev.AllocationResourcesExited)
    assert {(x.agent_id, x.exit_code, x.killed) for x in ends} == {("a", -15, True), ("b", -15, True)}


async def test_a_run_declared_lost_kills_what_it_runs_and_registers_again(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    heard: list[Heartbeat] = []

    async def hear(msg: object) -> None:
        heard.append(Heartbeat.decode(msg.data))  # type: ignore[attr-defined]

    namespace = str(settings["namespace"])
    subscription = await event_store.nc.subscribe(heartbeat_subject(namespace, "a"), cb=hear)
    try:
        async with agents(settings, tmp_path, "a"):
            [first] = [
                e for e in await wait_for(event_store, registrations(1)) if e.HasField("agent_registered")
            ]
            await until(lambda: any(h.registration_event_id == first.event_id for h in heard), "a heartbeat")
            await place(event_store, "1.1", "exec sleep 300", "a")
            await until(lambda: len(pids_of(tmp_path, "a")) == 1, "the allocation to start")
            [pid] = pids_of(tmp_path, "a")
            lost = ev.AgentLost(agent_id="a", registration_event_id=first.event_id, reason="no heartbeat")
            await event_store.append(
                Append(aggregate("agent", "a"), lost, f"agent-lost-{first.event_id}"), actor=ACTOR
            )
            envelopes = await wait_for(event_store, registrations(2))
            await until(lambda: not process_alive(pid), "its process to be killed")
            again = [e for e in envelopes if e.HasField("agent_registered")][1]
            assert again.event_id == f"{first.event_id}-1"
            assert again.agent_registered == first.agent_registered
            await until(
                lambda: heard[-1].registration_event_id == again.event_id, "heartbeats of the new one"
            )
            envelopes = await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationExited)))
            # The new registration can take new work.
            await place(event_store, "2.1", "true", "a")
            envelopes = await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationExited)[1:]))
    finally:
        await subscription.unsubscribe()
    exits = payloads(envelopes, ev.AllocationExited)
    # No scheduler here to close 1.1: the agent's new registration did (its process was gone).
    assert [(x.allocation_id, x.exit_code, x.error, x.agent_lost) for x in exits] == [
        ("1.1", -1, "agent restarted", True),
        ("2.1", 0, "", False),
    ]
