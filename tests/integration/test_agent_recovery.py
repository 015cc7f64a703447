"""No stray processes, and allocation folders that go away: the agent as a
real `python -m services.agent` process, killed with SIGKILL under a running
trial and started again, against a real nats-server; records planted in its
work dir; folders of allocations that ended well or badly."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from test_services_flow import (
    ES,
    TS,
    cluster,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    wait_for,
)

from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.agent.core import AgentAllocation, AgentState
from services.agent.launch import AgentIdentity
from services.agent.runner import Runner
from services.agent.workdir import EXIT_NOTE
from services.common.eventstore import EventStore
from services.common.processes import (
    ProcessRecord,
    process_alive,
    read_process_record,
    start_ticks,
    write_process_record,
)
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler
from services.searcher.__main__ import SearcherSettings
from services.searcher.__main__ import run as run_searcher

DEADLINE_S = 30.0

# The first run writes its pid and its child's (same process group), then sleeps; later runs end at once.
SLEEPER = (
    "import os, subprocess, sys, time\n"
    "if os.environ['DET_TRIAL_RUN_ID'] != '1':\n"
    "    print('run', os.environ['DET_TRIAL_RUN_ID'], flush=True)\n"
    "    sys.exit(0)\n"
    "child = subprocess.Popen(['sleep', '300'])\n"
    "open('pids.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
    "os.rename('pids.tmp', 'pids')\n"
    "time.sleep(300)\n"
)


def agent_process(
    nats_url: str, namespace: str, work_dir: Path, *, fork_server: bool
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DET_NATS_URL": nats_url,
        "DET_NAMESPACE": namespace,
        "DET_CLUSTER_SECRET": "test-secret",
        "DET_AGENT_ID": "agent-1",
        "DET_AGENT_WORK_DIR": str(work_dir),
        "DET_AGENT_GPUS": "0",
        "DET_AGENT_KILL_GRACE_S": "2",
        "DET_AGENT_FORK_SERVER": "1" if fork_server else "0",
        "DET_LOG_FILE": str(work_dir.parent / "agent.log"),
    }
    return subprocess.Popen([sys.executable, "-m", "services.agent"], env=env, stdin=subprocess.DEVNULL)


@asynccontextmanager
async def searcher_and_scheduler(settings: dict[str, object]) -> AsyncIterator[None]:
    tasks = [
        asyncio.create_task(run_searcher(SearcherSettings(**settings))),
        asyncio.create_task(run_scheduler(SchedulerSettings(**settings))),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def gone(pid: int) -> bool:
    return not process_alive(pid)


def sleeping_group(
    record: Path, agent_id: str = "agent-1", allocation_id: str = "9.1", ticks_off: int = 0
) -> subprocess.Popen[bytes]:
    """A process group like a trial's (a shell with a child), recorded at
    `record`; with ticks_off, as if its pid had been another process's."""
    record.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(["sh", "-c", "sleep 300 & wait"], start_new_session=True)
    ticks = start_ticks(process.pid)
    assert ticks is not None
    write_process_record(
        record, ProcessRecord(agent_id, allocation_id, process.pid, process.pid, ticks + ticks_off)
    )
    return process


@pytest.mark.parametrize("fork_server", [False, True], ids=["exec", "forked"])
async def test_a_trial_dies_with_its_agent_and_a_restarted_agent_runs_it_once_more(
    event_store: EventStore,
    settings: dict[str, object],
    nats_url: str,
    namespace: str,
    tmp_path: Path,
    fork_server: bool,
) -> None:
    context = tmp_path / "context"
    context.mkdir()
    (context / "train.py").write_text(SLEEPER)
    digest = await event_store.contexts.put(pack_context(context))
    work_dir = tmp_path / "work"
    agent = agent_process(nats_url, namespace, work_dir, fork_server=fork_server)
    try:
        async with searcher_and_scheduler(settings):
            # No restart allowed: a run lost with the agent is not the trial's failure.
            cfg = config("python3 train.py", max_restarts=0)
            await create_experiment(event_store, 1, cfg, context_hash=digest)
            pids = work_dir / "1.1" / "trial" / "pids"
            await until(pids.exists, "the trial to start")
            trial, child = (int(pid) for pid in pids.read_text().split())
            record = read_process_record(work_dir / "1.1" / "process.json")
            assert (record.agent_id, record.allocation_id) == ("agent-1", "1.1")
            assert os.getpgid(trial) == os.getpgid(child) == record.pgid != os.getpgid(0)
            leader = record.pid  # the trial itself, or the shell running it
            assert record.start_ticks == start_ticks(leader)
            # The trial can write its pids before the agent's AllocationStarted is stored.
            await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))

            agent.kill()
            agent.wait()
            await until(lambda: gone(leader), "the process to die with its agent")
            await until(lambda: gone(trial) and gone(child), "what it started to be killed")

            agent = agent_process(nats_url, namespace, work_dir, fork_server=fork_server)
            envelopes = await wait_for(event_store, experiment_ended)
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(10) == 0
    exits = payloads(envelopes, ev.AllocationExited)
    assert [(x.allocation_id, x.exit_code, x.agent_lost) for x in exits] == [
        ("1.1", -1, True),
        ("1.2", 0, False),
    ]
    assert [s.allocation_id for s in payloads(envelopes, ev.AllocationStarted)] == ["1.1", "1.2"]
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [
        ES.EXPERIMENT_STATE_COMPLETED
    ]
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_COMPLETED]
    # The lost run's folder is kept for debugging; the one that ended well is gone.
    note = json.loads((work_dir / "1.1" / EXIT_NOTE).read_text())
    assert (note["allocation_id"], note["error"]) == ("1.1", "agent restarted")
    assert not (work_dir / "1.2").exists()


async def test_a_restarted_agent_kills_recorded_groups_but_never_a_reused_pid(
    settings: dict[str, object], tmp_path: Path
) -> None:
    work_dir = tmp_path / "work"
    closed = sleeping_group(work_dir / "9.1" / "process.json")
    reused = sleeping_group(work_dir / "8.1" / "process.json", allocation_id="8.1", ticks_off=-1)
    other_agent = sleeping_group(work_dir / "7.1" / "process.json", agent_id="agent-2", allocation_id="7.1")
    try:
        async with cluster(settings, work_dir):
            await until(lambda: closed.poll() is not None, "the recorded group to be killed")
            await asyncio.sleep(0.5)
            assert reused.poll() is None and other_agent.poll() is None
    finally:
        for process in (closed, reused, other_agent):
            os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
            process.wait()
    assert closed.returncode == -signal.SIGTERM
    # Both of this agent's folders are kept a while, noted as lost with the earlier run.
    for allocation_id in ("9.1", "8.1"):
        assert json.loads((work_dir / allocation_id / EXIT_NOTE).read_text())["error"] == "agent restarted"
    assert not (work_dir / "7.1" / EXIT_NOTE).exists()


async def test_folders_go_when_their_allocation_ends_well_and_a_while_after_it_failed(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    work_dir = tmp_path / "work"
    old = work_dir / "5.1"
    old.mkdir(parents=True)
    note = {
        "agent_id": "agent-1",
        "allocation_id": "5.1",
        "exit_code": 1,
        "killed": False,
        "error": "",
        "ended_at": time.time() - 3600,
    }
    (old / EXIT_NOTE).write_text(json.dumps(note))
    go = tmp_path / "go"
    agent = AgentSettings(**settings, agent_id="agent-1", agent_work_dir=work_dir, agent_keep_failed_s=1.5)
    tasks = [
        asyncio.create_task(run_searcher(SearcherSettings(**settings))),
        asyncio.create_task(run_scheduler(SchedulerSettings(**settings))),
        asyncio.create_task(run_agent(agent)),
    ]
    try:
        await until(lambda: not old.exists(), "the old failed folder to be swept at start-up")
        await create_experiment(event_store, 1, config(["sh", "-c", "echo hi > out; exit 3"], max_restarts=0))
        await create_experiment(
            event_store, 2, config(["sh", "-c", f"while [ ! -f {go} ]; do sleep 0.05; done"])
        )
        envelopes = await wait_for(event_store, lambda es: len(payloads(es, ev.AllocationExited)) == 1)
        [failed] = payloads(envelopes, ev.AllocationExited)
        kept = work_dir / failed.allocation_id
        assert (kept / "trial" / "out").read_text() == "hi\n"
        assert json.loads((kept / EXIT_NOTE).read_text())["exit_code"] == 3
        await until(lambda: not kept.exists(), "the failed folder to be swept")
        running = work_dir / "2.1"
        assert running.is_dir() and (running / "process.json").is_file()  # older than 1.5 s, but running
        go.touch()
        await wait_for(event_store, lambda es: len(payloads(es, ev.AllocationExited)) == 2)
        await until(lambda: not running.exists(), "the folder of the allocation that ended well to go")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_run_starts_nothing_before_its_own_registration_is_folded(
    event_store: EventStore, tmp_path: Path
) -> None:
    """Even when the Shell calls on_state early in a replay, an allocation
    assigned so far (an earlier run's) is never started by this run."""
    launch = ev.TrialLaunch(
        experiment_id=1, trial_id=1, trial_run_id=1, config_json='{"entrypoint": "sleep 300"}'
    )
    requested = ev.AllocationRequested(
        allocation_id="1.1", task_id="1", task_type="TRIAL", slots=1, trial=launch
    )
    allocations = {"1.1": AgentAllocation(requested, "agent-1", (0,))}
    runner = Runner(
        event_store, AgentIdentity("agent-1", "c", "m", ""), tmp_path, "s", "cpu", "service:agent"
    )
    try:
        assert await runner.on_state(AgentState(allocations=allocations)) == []
        assert runner.table == {} and not (tmp_path / "1.1").exists()
        await runner.on_state(AgentState(allocations=allocations, registered=True))
        assert list(runner.table) == ["1.1"]
        await until(lambda: (tmp_path / "1.1" / "process.json").exists(), "the registered run to start it")
    finally:
        await runner.stop()
