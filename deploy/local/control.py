"""What the `det deploy local` commands do with a local cluster: start its
supervisor (cluster-up), repair it, stop it leaving no process behind
(cluster-down), ask its supervisor to restart, stop or start one part, and
read its status. The supervisor (supervisor.py) runs the parts.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from deploy.local import mailbox, replay_home
from deploy.local.cluster import (
    AGENT_SECRETS,
    AgentSpec,
    ClusterOptions,
    ClusterRecord,
    DeployError,
    RemoteCluster,
    added_agent,
    agent_secret_file,
    cluster_identity,
    every_agent_work_dir,
    http_port,
    part_credentials,
    proxy_port,
    recorded_cluster_id,
    service_environment,
)
from deploy.local.credentials import agent_user, credentials, without_agent
from deploy.local.decisions import PARTS, STOP_DEADLINE_S, Action, UpOutcome, plan_cluster_up, startup_failure
from deploy.local.parts import STOP_SIGNALS, cluster_nats, last_words
from deploy.local.postgres_home import postgres_data_dir, postgres_os_user, prune_orphans
from deploy.local.servers import port_is_taken
from deploy.local.status import ClusterStatus, PartStatus, event_reports, read_status, status_path
from deploy.local.tls import TlsError, check_pair
from deploy.local.trial_home import trial_user_name, trial_user_note
from services.common.os_users import OsUserError
from services.common.processes import (
    ProcessRecordError,
    kill_recorded_process_group,
    process_alive,
    start_ticks,
)

READY_DEADLINE_S = 60.0
LEFTOVER_GRACE_S = 10.0
POLL_S = 0.1
FOLDERS = ("nats", "checkpoints", "logs", "run")


@dataclass(frozen=True)
class UpResult:
    outcome: UpOutcome
    # What was done, for people.
    done: str
    record: ClusterRecord


# -- cluster-up ------------------------------------------------------------------------


def cluster_up(options: ClusterOptions) -> UpResult:
    """Starts a cluster, repairs one, or finds it running: UpResult.outcome
    says which. DeployError names the part that failed and shows its log.
    The options' TLS files are checked already (check_tls)."""
    data_dir = options.data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    leftovers = _leftovers(record) if record is not None else {}
    supervisor_alive = "supervisor" in leftovers
    status = read_status(status_path(data_dir)) if supervisor_alive else None
    plan = plan_cluster_up(
        recorded=record is not None,
        supervisor_alive=supervisor_alive,
        leftovers_alive=bool(leftovers),
        states={part.name: part.state for part in status.parts} if status else {},
    )
    if record is None or plan.action == "start":
        if not options.replay:
            replay_home.refuse_cluster_up(data_dir)
        return _start(replace(options, data_dir=data_dir))
    if plan.action == "replace-supervisor":
        return _replace_supervisor(data_dir, record, sorted(leftovers))
    before = {part.name: part.restarts for part in status.parts} if status else {}
    if plan.action == "start-parts":
        mailbox.post(data_dir, mailbox.Request("start", plan.parts), wake=record.supervisor_pid)
    _wait_until_running(data_dir, record.supervisor_pid, before)
    done = (
        f"started {', '.join(plan.parts)} again"
        if plan.parts
        else f"a cluster is already running from {data_dir}, every part of it: nothing to do"
    )
    return UpResult(plan.outcome, done, record)


def _start(options: ClusterOptions) -> UpResult:
    data_dir = options.data_dir
    _check_ports(options)
    if not options.replay:  # a replay runs no trial
        _note_trial_user(options)
    for folder in FOLDERS:
        (data_dir / folder).mkdir(parents=True, exist_ok=True)
    _clear_run_files(data_dir)
    record = ClusterRecord.of(options)
    record.postgres_data_dir = str(_postgres_place(data_dir))
    record.save(data_dir)
    supervisor = _launch_supervisor(data_dir)
    try:
        _wait_until_running(data_dir, supervisor, {}, READY_DEADLINE_S + replay_home.loading_s(data_dir))
    except DeployError:
        _stop(data_dir, ClusterRecord.load(data_dir) or record)
        raise
    return UpResult(UpOutcome.STARTED, "started a new cluster", record)


def _note_trial_user(options: ClusterOptions) -> None:
    try:
        print(trial_user_note(trial_user_name(options.settings, euid=os.geteuid())))
    except OsUserError as error:
        hint = "or let trials run as root: DET_AGENT_TRIAL_USER= det deploy local cluster-up"
        raise DeployError(f"{error} ({hint})") from None


def _replace_supervisor(data_dir: Path, record: ClusterRecord, leftovers: list[str]) -> UpResult:
    """Its supervisor is gone but parts it started still run: they are
    stopped (trials too) and a new supervisor starts every part again."""
    _stop_leftovers(data_dir, record)
    _clear_run_files(data_dir)
    if not record.postgres_data_dir:  # recorded by an older cluster-up
        record.postgres_data_dir = str(_postgres_place(data_dir))
    record.save(data_dir)
    _wait_until_running(data_dir, _launch_supervisor(data_dir), {})
    done = (
        f"its supervisor had exited: stopped what it left running ({', '.join(leftovers)}) "
        "and started every part again"
    )
    return UpResult(UpOutcome.REPAIRED, done, record)


def _postgres_place(data_dir: Path) -> Path:
    """Where PostgreSQL keeps its data: in the data folder, unless (as root)
    its own user cannot reach it there (postgres_home.py). The folders under
    the system's place of clusters whose data folder is gone are removed."""
    user = postgres_os_user()
    if user is not None:
        for removed in prune_orphans(recorded_cluster_id):
            print(f"Removed {removed}: the read models of a cluster whose data folder is gone")
    return postgres_data_dir(data_dir, cluster_identity(data_dir)[0], user)


def check_tls(options: ClusterOptions) -> None:
    """DeployError unless the TLS files are given together, exist, parse and match: checked
    before cluster-up changes anything."""
    if bool(options.tls_cert) != bool(options.tls_key):
        raise DeployError("--tls-cert and --tls-key go together: give both or neither")
    if not options.tls_cert:
        return
    try:
        check_pair(Path(options.tls_cert), Path(options.tls_key))
    except TlsError as error:
        raise DeployError(str(error)) from None


def _check_ports(options: ClusterOptions) -> None:
    for name, port in (
        ("master", options.master_port),
        ("nats", options.nats_port),
        ("postgres", options.postgres_port),
    ):
        if port_is_taken(port):
            raise DeployError(
                f"port {port} ({name}) is already in use; free it or pick another with --{name}-port"
            )
    for port, what in (
        (http_port(options.master_port, options.settings), "the HTTP API and web UI: the master's port + 1"),
        (proxy_port(options.master_port, options.settings), "tasks' pages: the master's port + 2"),
    ):
        if port_is_taken(port):
            raise DeployError(
                f"port {port} ({what}) is already in use; free it or pick another master port with"
                " --master-port"
            )


def _launch_supervisor(data_dir: Path) -> int:
    """Starts the supervisor, detached (its own session); returns its pid."""
    with open(data_dir / "logs" / "supervisor.out", "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "deploy.local.supervisor", "--data-dir", str(data_dir)],
            cwd=data_dir,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process.pid


def _wait_until_running(
    data_dir: Path,
    supervisor_pid: int,
    restarts_before: dict[str, int],
    deadline_s: float = READY_DEADLINE_S,
) -> ClusterStatus:
    """Until the supervisor reports every part running. DeployError when a
    part crashed meanwhile, the supervisor exited, or `deadline_s` passed."""
    deadline = time.monotonic() + deadline_s
    while True:
        status = _status_of(data_dir, supervisor_pid)
        if status is not None:
            crashed = startup_failure({p.name: p.restarts for p in status.parts}, restarts_before)
            if crashed is not None:
                raise DeployError(f"{crashed} failed: {status.part(crashed).last_error}")
            if all(part.state == "running" for part in status.parts):
                return status
        if time.monotonic() > deadline:
            raise DeployError(_not_ready(data_dir, status, deadline_s))
        time.sleep(POLL_S)


def _status_of(data_dir: Path, supervisor_pid: int) -> ClusterStatus | None:
    """The status that supervisor wrote (None: not yet); DeployError if it exited."""
    if not process_alive(supervisor_pid):
        raise DeployError(f"the supervisor exited; {last_words(data_dir / 'logs', 'supervisor')}")
    status = read_status(status_path(data_dir))
    return status if status is not None and status.supervisor_pid == supervisor_pid else None


def _not_ready(data_dir: Path, status: ClusterStatus | None, deadline_s: float) -> str:
    waiting = [part for part in status.parts if part.state != "running"] if status else []
    if not waiting:
        return f"the supervisor did not report after {deadline_s:.0f} s"
    first = waiting[0]
    return (
        f"{first.name} was not ready after {deadline_s:.0f} s ({first.state}); "
        f"{last_words(data_dir / 'logs', first.name)}"
    )


# -- cluster-down ----------------------------------------------------------------------


def cluster_down(data_dir: Path) -> bool:
    """Stops every part and every allocation's processes; False when nothing
    of a cluster was running there."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is None:
        return False
    was_running = bool(_leftovers(record))
    _stop(data_dir, record)
    return was_running


def _stop(data_dir: Path, record: ClusterRecord) -> None:
    """The supervisor stops the parts (SIGTERM); whatever still runs then is
    killed, and the run files are removed."""
    supervisor = record.supervisor_pid
    if supervisor and _ours(supervisor, record.start_ticks.get("supervisor")):
        os.kill(supervisor, signal.SIGTERM)
        # It stops the parts one after the other, each within STOP_DEADLINE_S.
        _wait_gone([supervisor], STOP_DEADLINE_S * len(record.part_names()) + 10)
    _stop_leftovers(data_dir, ClusterRecord.load(data_dir) or record)
    _clear_run_files(data_dir)
    ClusterRecord.path(data_dir).unlink(missing_ok=True)


def _leftovers(record: ClusterRecord) -> dict[str, int]:
    """The recorded processes (parts and supervisor) that still run."""
    recorded = dict(record.pids, supervisor=record.supervisor_pid)
    return {name: pid for name, pid in recorded.items() if pid and _ours(pid, record.start_ticks.get(name))}


def _ours(pid: int, ticks: int | None) -> bool:
    """Alive and, when its start time was recorded (not in an older
    cluster.json), started then: a reused pid is someone else's."""
    return process_alive(pid) and (not ticks or start_ticks(pid) == ticks)


def _stop_leftovers(data_dir: Path, record: ClusterRecord) -> None:
    """Each recorded process still running gets its stop signal, then SIGKILL
    past LEFTOVER_GRACE_S (with its process group); then every allocation's
    recorded process group in the agents' work folders (cluster.every_agent_work_dir) is killed."""
    leftovers = _leftovers(record)
    for name, pid in leftovers.items():
        _signal_group(pid, STOP_SIGNALS.get(name, signal.SIGTERM))
    if not _wait_gone(list(leftovers.values()), LEFTOVER_GRACE_S):
        for pid in leftovers.values():
            _signal_group(pid, signal.SIGKILL)
        _wait_gone(list(leftovers.values()), LEFTOVER_GRACE_S)
    allocations = [
        record for folder in every_agent_work_dir(data_dir) for record in folder.glob("*/process.json")
    ]
    for process_record in sorted(allocations):
        try:
            kill_recorded_process_group(process_record)
        except ProcessRecordError:
            continue
    from services.agent.containers.runtime import remove_trial_containers  # docker: only here

    remove_trial_containers(every_agent_work_dir(data_dir))


def _signal_group(pid: int, signum: int) -> None:
    """Each part leads its own process group; one of an older cluster may not."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _wait_gone(pids: list[int], deadline_s: float) -> bool:
    deadline = time.monotonic() + deadline_s
    while any(process_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _clear_run_files(data_dir: Path) -> None:
    run = data_dir / "run"
    status_path(data_dir).unlink(missing_ok=True)
    for leftover in [*run.glob("*.ready"), *mailbox.requests_dir(data_dir).glob("*")]:
        leftover.unlink(missing_ok=True)


# -- one part --------------------------------------------------------------------------


def restart_part(data_dir: Path, name: str) -> PartStatus:
    """Stops the part and starts it again (not counted as a crash); returns
    once it is ready again."""
    return _ask(data_dir, "restart", name)


def stop_part(data_dir: Path, name: str) -> PartStatus:
    """Stops the part and keeps it stopped until start_part or cluster-up."""
    return _ask(data_dir, "stop", name)


def start_part(data_dir: Path, name: str) -> PartStatus:
    """Starts a stopped part (or one waiting out a backoff) now; returns once it is ready."""
    return _ask(data_dir, "start", name)


def _ask(data_dir: Path, action: Action, name: str) -> PartStatus:
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    names = record.part_names() if record is not None else PARTS
    if name not in names:
        raise DeployError(f"no part is called {name!r}; the parts are: {', '.join(names)}")
    supervisor = running_supervisor(data_dir)
    status = _status_of(data_dir, supervisor)
    before = status.part(name) if status is not None else None
    asked_at = time.time()
    mailbox.post(data_dir, mailbox.Request(action, (name,)), wake=supervisor)
    patience_s = STOP_DEADLINE_S + READY_DEADLINE_S
    deadline = time.monotonic() + patience_s
    while True:
        status = _status_of(data_dir, supervisor)
        part = status.part(name) if status is not None else None
        if part is not None and before is not None and part.restarts > before.restarts:
            raise DeployError(f"{name} failed: {part.last_error}")
        if part is not None and _done(action, part, asked_at):
            return part
        if time.monotonic() > deadline:
            raise DeployError(
                f"{name} did not {action} within {patience_s:.0f} s; {last_words(data_dir / 'logs', name)}"
            )
        time.sleep(POLL_S)


def _done(action: Action, part: PartStatus, asked_at: float) -> bool:
    if action == "stop":
        return part.state == "stopped"
    return part.state == "running" and (action == "start" or part.started_at >= asked_at)


def running_supervisor(data_dir: Path) -> int:
    """The pid of the supervisor running the cluster in `data_dir`; DeployError if none."""
    record = ClusterRecord.load(data_dir)
    if record is None or not _ours(record.supervisor_pid, record.start_ticks.get("supervisor")):
        why = (
            ""
            if record is None
            else " (its supervisor has exited: repair it with det deploy local cluster-up)"
        )
        raise DeployError(f"no cluster is running from {data_dir}{why}")
    return record.supervisor_pid


def gateway_environment(data_dir: Path) -> dict[str, str]:
    """The settings and credentials of the gateway of the cluster running from `data_dir`,
    for a command of the gateway's own (`det deploy local verify`); DeployError when none
    runs there, or when the folder holds agents for a cluster elsewhere."""
    running_supervisor(data_dir)
    record = ClusterRecord.load(data_dir)
    assert record is not None  # running_supervisor found it
    if record.remote_cluster() is not None:
        raise DeployError(
            f"{data_dir} holds agents for a cluster elsewhere: run this on the cluster's machine"
        )
    nats = cluster_nats(data_dir, record, credentials(data_dir))
    environment = service_environment(record.options(data_dir), data_dir, nats.url)
    return dict(environment, **part_credentials("gateway", data_dir, record.postgres_port))


# -- status ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterReport:
    data_dir: Path
    record: ClusterRecord
    status: ClusterStatus | None
    supervisor_alive: bool
    # Part -> its report of skipped events and (the gateway's) projector progress (status.py).
    events: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The Docker Compose project running it (deploy/compose/); "": the supervisor runs it.
    compose_project: str = ""


def cluster_report(data_dir: Path) -> ClusterReport:
    """What `det deploy local status` shows; DeployError when no cluster was started there."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is None:
        raise DeployError(f"no cluster is running from {data_dir}")
    alive = (
        _ours(record.supervisor_pid, record.start_ticks.get("supervisor")) if record.supervisor_pid else False
    )
    return ClusterReport(data_dir, record, read_status(status_path(data_dir)), alive, event_reports(data_dir))


# -- agents ----------------------------------------------------------------------------


def agent_up(data_dir: Path, agent_id: str, cpu_slots: int, pool: str) -> AgentSpec:
    """Adds an agent to the supervisor running in `data_dir` (a cluster, or a
    folder of agents for a cluster elsewhere); returns once it is running."""
    data_dir = data_dir.expanduser().resolve()
    supervisor = running_supervisor(data_dir)
    record = ClusterRecord.load(data_dir)
    assert record is not None  # running_supervisor found it
    agent = added_agent(record.agent_specs(), agent_id, cpu_slots, pool)
    mailbox.post(data_dir, mailbox.Request("add-agent", (agent.part,), agent), wake=supervisor)
    _wait_for_part(
        data_dir, supervisor, agent.part, lambda part: part is not None and part.state == "running"
    )
    return agent


def agent_down(data_dir: Path, agent_id: str) -> AgentSpec:
    """Stops an agent (its trials stop and run again elsewhere) and forgets it;
    without an id, the agent added last. A folder of agents for a cluster
    elsewhere whose last agent goes is stopped altogether."""
    data_dir = data_dir.expanduser().resolve()
    supervisor = running_supervisor(data_dir)
    record = ClusterRecord.load(data_dir)
    assert record is not None
    agents = record.agent_specs()
    if not agents:
        raise DeployError(f"no agent runs from {data_dir}")
    chosen = (
        agents[-1] if not agent_id else next((a for a in agents if agent_id in (a.agent_id, a.part)), None)
    )
    if chosen is None:
        raise DeployError(
            f"no agent {agent_id!r} runs from {data_dir}; they are: " + ", ".join(a.agent_id for a in agents)
        )
    mailbox.post(data_dir, mailbox.Request("remove-agent", (chosen.part,)), wake=supervisor)
    _wait_for_part(data_dir, supervisor, chosen.part, lambda part: part is None)
    if record.remote and len(agents) == 1:
        _stop(data_dir, ClusterRecord.load(data_dir) or record)
    return chosen


def _wait_for_part(
    data_dir: Path, supervisor: int, name: str, done: Callable[[PartStatus | None], bool]
) -> None:
    patience_s = STOP_DEADLINE_S + READY_DEADLINE_S
    deadline = time.monotonic() + patience_s
    while True:
        status = _status_of(data_dir, supervisor)
        part = next((p for p in status.parts if p.name == name), None) if status is not None else None
        if status is not None and done(part):
            return
        if part is not None and part.restarts > 0 and part.state == "backoff":
            raise DeployError(f"{name} failed: {part.last_error}")
        if time.monotonic() > deadline:
            raise DeployError(
                f"{name} was not done within {patience_s:.0f} s; {last_words(data_dir / 'logs', name)}"
            )
        time.sleep(POLL_S)


def agent_credentials(data_dir: Path, agent_id: str) -> Path:
    """The secret file of the agent `agent_id`, to run on another machine (agent-up
    --master-host --secret-file): its own nats-server user, made now if new and let in
    by the running nats-server at once (and by every later one)."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is not None and record.remote:
        raise DeployError(f"{data_dir} runs agents of a cluster elsewhere: ask that cluster's operator")
    if recorded_cluster_id(data_dir) is None:
        raise DeployError(f"no cluster was started from {data_dir} (det deploy local cluster-up)")
    path = agent_secret_file(data_dir, agent_id)
    if record is not None and _leftovers(record):
        found = credentials(data_dir)
        user = found.nats[agent_user(agent_id)]
        if not cluster_nats(data_dir, record, found).reload(user.name, user.password):
            raise DeployError(f"nats-server did not take agent {agent_id}'s user; see {data_dir / 'logs'}")
    return path


def revoke_agent_credentials(data_dir: Path, agent_id: str) -> None:
    """Cuts an agent on another machine off: its nats-server user goes (its connections
    are closed, its password no longer logs in) and its secret file with it. Its token
    secret is the cluster's: see the README on what else that file held."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is not None and any(agent.agent_id == agent_id for agent in record.agent_specs()):
        raise DeployError(f"agent {agent_id} runs here: stop it with agent-down --agent-id {agent_id}")
    user = without_agent(data_dir, agent_id)
    if user is None:
        raise DeployError(f"agent {agent_id} has no credentials in {data_dir}")
    (data_dir / AGENT_SECRETS / f"{agent_id}.secret").unlink(missing_ok=True)
    if record is not None and _leftovers(record):
        nats_server = cluster_nats(data_dir, record, credentials(data_dir))
        if not nats_server.reload(user.name, user.password, let_in=False):
            raise DeployError(f"nats-server did not drop agent {agent_id}'s user; see {data_dir / 'logs'}")


def remote_agent_up(
    data_dir: Path, remote: RemoteCluster, agent: AgentSpec, options: ClusterOptions
) -> UpResult:
    """An agent for the cluster `remote` describes, run by a supervisor of its
    own in `data_dir` (started here unless one runs there: then it is added)."""
    data_dir = data_dir.expanduser().resolve()
    record = ClusterRecord.load(data_dir)
    if record is not None and _leftovers(record):
        if not record.remote:
            raise DeployError(f"a cluster runs from {data_dir}: add agents to it without --master-host")
        if record.remote_cluster() != remote:
            raise DeployError(
                f"the agents in {data_dir} belong to another cluster ({record.remote['cluster_id']}, "
                f"master {record.remote['master_address']}); use another --data-dir"
            )
        added = agent_up(data_dir, agent.agent_id, agent.cpu_slots, agent.pool)
        return UpResult(UpOutcome.STARTED, f"added agent {added.agent_id}", record)
    for folder in ("logs", "run"):
        (data_dir / folder).mkdir(parents=True, exist_ok=True)
    _clear_run_files(data_dir)
    record = ClusterRecord.of(replace(options, data_dir=data_dir))
    record.agents, record.remote = [asdict(agent)], asdict(remote)
    record.save(data_dir)
    try:
        _wait_until_running(data_dir, _launch_supervisor(data_dir), {})
    except DeployError:
        _stop(data_dir, ClusterRecord.load(data_dir) or record)
        raise
    return UpResult(UpOutcome.STARTED, f"started agent {agent.agent_id}", record)
