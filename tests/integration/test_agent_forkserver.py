"""The agent with its fork server on (DET_AGENT_FORK_SERVER), against a real
nats-server: plain `python3 script.py` trials run in children of a warm
process; anything else runs as before."""

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from test_services_flow import (
    ES,
    TS,
    config,
    create_experiment,
    experiment_ended,
    payloads,
    trial_logs,
    wait_for,
)

from determined.common.context import pack_context
from determined.proto import events_pb2 as ev
from services.agent.__main__ import AgentSettings
from services.agent.__main__ import run as run_agent
from services.agent.launch import AgentError
from services.agent.runner import ForkServer
from services.common.envelope import Append
from services.common.eventstore import EventStore
from services.common.processes import process_alive
from services.scheduler.__main__ import SchedulerSettings
from services.scheduler.__main__ import run as run_scheduler
from services.searcher.__main__ import SearcherSettings
from services.searcher.__main__ import run as run_searcher

# True only in a child of the fork server: a fresh `import determined` loads no protos.
FORKED = "import sys; print('forked', 'determined.proto.api_pb2' in sys.modules, flush=True)\n"


@asynccontextmanager
async def forking_cluster(settings: dict[str, object], work_dir: Path) -> AsyncIterator[None]:
    agent = AgentSettings(
        **settings,
        agent_id="agent-1",
        agent_work_dir=work_dir,
        agent_kill_grace_s=2,
        agent_fork_server=True,
        agent_preload="json,no_such_module_here",
    )
    tasks = [
        asyncio.create_task(run_searcher(SearcherSettings(**settings))),
        asyncio.create_task(run_scheduler(SchedulerSettings(**settings))),
        asyncio.create_task(run_agent(agent)),
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _context(store: EventStore, folder: Path, script: str) -> str:
    folder.mkdir()
    (folder / "train.py").write_text(script)
    return await store.contexts.put(pack_context(folder))


async def _lines(store: EventStore, trial_id: int) -> list[tuple[str, str]]:
    return [(line.stdtype, line.log) for b in await trial_logs(store, trial_id) for line in b.lines]


async def test_a_forked_trial_gets_its_environment_and_its_exit_code_is_reported(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    digest = await _context(
        event_store,
        tmp_path / "context",
        FORKED + "import os, sys, determined\n"
        "print(os.environ['GREETING'], os.environ['DET_TRIAL_ID'], sys.argv, os.getcwd() == sys.path[0])\n"
        "assert 'DET_CLUSTER_SECRET' not in os.environ and os.getpgid(0) == os.getpid()\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)\n",
    )
    cfg = config(
        "python3 train.py --lr 0.1",
        max_restarts=0,
        environment={"environment_variables": ["GREETING=hello"]},
    )
    async with forking_cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, cfg, context_hash=digest)
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert (exited.exit_code, exited.killed) == (3, False)
    assert [c.state for c in payloads(envelopes, ev.ExperimentStateChanged)] == [ES.EXPERIMENT_STATE_ERROR]
    assert await _lines(event_store, 1) == [
        ("stdout", "forked True"),
        ("stdout", "hello 1 ['train.py', '--lr', '0.1'] True"),
        ("stderr", "to stderr"),
    ]


async def test_a_forked_trial_is_killed_with_its_process_group(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    child_pid = tmp_path / "child.pid"
    digest = await _context(
        event_store,
        tmp_path / "context",
        FORKED + "import subprocess, time\n"
        f"open({str(child_pid)!r}, 'w').write(str(subprocess.Popen(['sleep', '60']).pid))\n"
        "time.sleep(60)\n",
    )
    async with forking_cluster(settings, tmp_path / "work"):
        await create_experiment(event_store, 1, config(["python3", "train.py"]), context_hash=digest)
        await wait_for(event_store, lambda es: bool(payloads(es, ev.AllocationStarted)))
        deadline = time.monotonic() + 10
        while not (child_pid.exists() and child_pid.read_text()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        kill = Append("experiment/1", ev.ExperimentKillRequested(experiment_id=1), "kill-1")
        await event_store.append(kill, actor="user:determined")
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.killed and exited.exit_code == -15
    assert [t.state for t in payloads(envelopes, ev.TrialEnded)] == [TS.TRIAL_STATE_CANCELED]
    assert ("stdout", "forked True") in await _lines(event_store, 1)
    grandchild = int(child_pid.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # killed with the group; reaped by init
            os.kill(grandchild, 0)
            await asyncio.sleep(0.05)


async def test_an_entrypoint_that_is_not_a_plain_script_runs_as_before(
    event_store: EventStore, settings: dict[str, object], tmp_path: Path
) -> None:
    digest = await _context(event_store, tmp_path / "context", FORKED)
    async with forking_cluster(settings, tmp_path / "work"):
        await create_experiment(
            event_store, 1, config("python3 train.py && exit 4", max_restarts=0), context_hash=digest
        )
        envelopes = await wait_for(event_store, experiment_ended)
    [exited] = payloads(envelopes, ev.AllocationExited)
    assert exited.exit_code == 4
    assert await _lines(event_store, 1) == [("stdout", "forked False")]


async def test_a_forked_child_records_itself_first_and_dies_with_the_fork_server(tmp_path: Path) -> None:
    """The child writes its process record before it runs the script; the
    kernel kills it when the fork server dies (as the server dies with the agent)."""
    (tmp_path / "t.py").write_text(
        "import json, os, time\n"
        "record = json.load(open('process.json'))\n"
        "print(record['pid'] == os.getpid() == record['pgid'], record['allocation_id'], flush=True)\n"
        "time.sleep(300)\n"
    )
    env = {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1"}
    record = {"path": str(tmp_path / "process.json"), "agent_id": "agent-1", "allocation_id": "4.1"}
    server = ForkServer()
    try:
        process = await server.spawn(["t.py"], tmp_path, env, record)
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 30) == b"True 4.1\n"
        assert server.process is not None
        server.process.kill()
        assert await asyncio.wait_for(process.wait(), 10) != 0
        assert not process_alive(process.pid)
    finally:
        await server.close()


async def test_a_request_with_a_bad_record_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("print('ran')\n")
    server = ForkServer()
    try:
        with pytest.raises(AgentError, match="record must be an object of strings"):
            await server.spawn(
                ["t.py"], tmp_path, {"PATH": os.environ["PATH"]}, {"path": str(tmp_path / "p")}
            )
    finally:
        await server.close()


@pytest.mark.parametrize(
    "imports", ["determined", "determined, determined.core, grpc, determined.proto.api_pb2_grpc"]
)
async def test_start_latency_with_and_without_the_fork_server(tmp_path: Path, imports: str) -> None:
    """Measured, not asserted: from asking for the process to its exit."""
    (tmp_path / "t.py").write_text(f"import {imports}\n")
    env = {"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1"}
    server = ForkServer()
    try:
        await (await server.spawn(["t.py"], tmp_path, env)).wait()  # starts the server
        forked, fresh = [], []
        for _ in range(5):
            start = time.perf_counter()
            process = await server.spawn(["t.py"], tmp_path, env)
            assert process.stdout is not None and process.stderr is not None
            await asyncio.gather(process.stdout.read(), process.stderr.read())
            assert await process.wait() == 0
            forked.append(time.perf_counter() - start)
            start = time.perf_counter()
            exec_ = await asyncio.create_subprocess_exec(sys.executable, "t.py", cwd=tmp_path, env=env)
            assert await exec_.wait() == 0
            fresh.append(time.perf_counter() - start)
    finally:
        await server.close()
    print(
        f"\nstart to exit, `import {imports}` (median of 5): fork server "
        f"{sorted(forked)[2] * 1000:.1f} ms, new process {sorted(fresh)[2] * 1000:.1f} ms"
    )
