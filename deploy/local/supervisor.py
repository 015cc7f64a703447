"""`python -m deploy.local.supervisor --data-dir D`: the one process of ours
that runs a local cluster (started, detached, by `det deploy local
cluster-up`, which first writes run/cluster.json).

It is the parent of every part: it starts nats-server, then PostgreSQL
(creating the database if missing), then the services; notices any part
that exits without being asked and starts it again after a backoff (0.5 s
doubling to 30 s; back to 0.5 s once a part has run a minute), recording why
it stopped; keeps run/status.json and run/cluster.json current; acts on the
requests in run/requests/ (mailbox.py); and on SIGTERM stops the parts in
reverse order and exits. One line per event goes to logs/supervisor.log.
The decisions are in decisions.py; this is the loop around them.
"""

import argparse
import contextlib
import logging
import logging.handlers
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import FrameType

from deploy.local import decisions, mailbox
from deploy.local.cluster import AgentSpec, ClusterRecord
from deploy.local.decisions import Part
from deploy.local.logrotate import rotate_if_large
from deploy.local.parts import STOP_SIGNALS, PartRunner
from deploy.local.servers import LOG_FILE_BYTES, LOG_FILES, ServerError, kill_group
from deploy.local.status import (
    DISK_REFRESH_S,
    ClusterStatus,
    PartStatus,
    disk_bytes,
    status_path,
    write_status,
)
from services.common.processes import start_ticks

TICK_S = 0.05
# A steady cluster's (decisions.steady) pause between ticks, unless a signal ends it sooner: an
# idle cluster's supervisor then wakes once a second, not twenty times.
STEADY_TICK_S = 1.0
# After a tick that raised (e.g. the disk is full), before the next.
ERROR_PAUSE_S = 1.0

log = logging.getLogger("supervisor")


class Supervisor:
    def __init__(self, data_dir: Path, record: ClusterRecord) -> None:
        self.data_dir = data_dir
        self.record = record
        self.runner = PartRunner(data_dir, record)
        self.parts = {part.name: part for part in decisions.initial_parts(record.part_names())}
        # Agent parts asked to go (agent-down): forgotten once stopped.
        self.removing: set[str] = set()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.shutting_down = False
        self.disk: dict[str, int] = {}
        self.maintained_at = 0.0
        self.published: tuple[Part, ...] = ()
        # Each signal the supervisor handles writes a byte here (signal.set_wakeup_fd, in run):
        # `pause` waits on it.
        self.wakeups = -1

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._shut_down)
        signal.signal(signal.SIGCHLD, self._woken)
        self.wakeups, wakeup_writes = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wakeup_writes, warn_on_full_buffer=False)
        self.record = replace(
            self.record,
            supervisor_pid=os.getpid(),
            pids={},
            start_ticks={"supervisor": start_ticks(os.getpid()) or 0},
        )
        self.record.save(self.data_dir)
        log.info("supervisor started (pid %d) for %s", os.getpid(), self.data_dir)
        while not (self.shutting_down and not self.processes):
            try:
                self.tick(time.time())
            except Exception:  # the parts must not lose their supervisor to one bad tick
                log.exception("a tick failed; carrying on in %.0f s", ERROR_PAUSE_S)
                time.sleep(ERROR_PAUSE_S)
            self.pause()
        self.parts = {name: decisions.shut_down(part) for name, part in self.parts.items()}
        self.publish(time.time(), force=True)
        log.info("supervisor stopped: every part is stopped")
        return 0

    def _shut_down(self, signum: int, _frame: FrameType | None) -> None:
        self.shutting_down = True

    def _woken(self, signum: int, _frame: FrameType | None) -> None:
        """SIGCHLD's handler: the signal's byte in `wakeups` is what matters."""

    def pause(self) -> None:
        """Until the next tick: TICK_S while a part is on its way somewhere, STEADY_TICK_S while
        the cluster is steady; any signal cuts it short: a part's exit or a request posted
        (SIGCHLD, see mailbox.post), a stop (SIGTERM, SIGINT)."""
        steady = not (self.shutting_down or self.removing) and decisions.steady(self.ordered())
        woken, _, _ = select.select([self.wakeups], [], [], STEADY_TICK_S if steady else TICK_S)
        if woken:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wakeups, 4096)

    def tick(self, now: float) -> None:
        self.reap(now)
        self.answer_requests(now)
        if self.shutting_down:
            self.stop_next(now)
        for name in decisions.to_kill(self.ordered(), now):
            log.info(
                "%s did not stop within %.0f s: killing its process group", name, decisions.STOP_DEADLINE_S
            )
            kill_group(self.parts[name].pid)
        for name in decisions.to_start(self.ordered(), now, shutting_down=self.shutting_down):
            self.start(name, now)
        self.check_ready(now)
        self.forget_removed()
        self.maintain(now)
        self.publish(now)

    def ordered(self) -> tuple[Part, ...]:
        """In start order: the servers, the services, then the agents as they were added."""
        return tuple(self.parts.values())

    # -- parts' processes --------------------------------------------------------------

    def start(self, name: str, now: float) -> None:
        part = self.parts[name]
        try:
            process = self.runner.spawn(name)
        except (ServerError, OSError) as error:
            self.parts[name] = decisions.failed_to_start(part, now, f"could not start: {error}")
            self._log_crash(self.parts[name])
            return
        self.processes[name] = process
        self.parts[name] = decisions.started(part, process.pid, now)
        log.info("%s started (pid %d)", name, process.pid)

    def check_ready(self, now: float) -> None:
        for name, part in self.parts.items():
            if part.state == "starting" and part.stop_reason == "" and self.runner.ready(name):
                self.parts[name] = decisions.became_ready(part)
                log.info("%s is ready (%.1f s after it started)", name, now - part.started_at)

    def reap(self, now: float) -> None:
        for name, process in list(self.processes.items()):
            returncode = process.poll()
            if returncode is None:
                continue
            del self.processes[name]
            kill_group(process.pid)  # what it left in its session
            self.runner.stopped(name)
            why = f"{decisions.exit_reason(returncode)}\n{self.runner.last_words(name)}"
            part = self.parts[name]
            self.parts[name] = decisions.exited(part, now, why, shutting_down=self.shutting_down)
            if self.parts[name].state == "backoff":
                self._log_crash(self.parts[name])
            else:
                log.info("%s stopped (%s)", name, decisions.exit_reason(returncode))

    def _log_crash(self, part: Part) -> None:
        first_line = part.last_error.splitlines()[0]
        log.info(
            "%s: %s; starting it again in %.1f s (restart %d)",
            part.name,
            first_line,
            part.backoff_s,
            part.restarts,
        )

    def send_stop(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.parts[name].pid, STOP_SIGNALS.get(name, signal.SIGTERM))

    def stop_next(self, now: float) -> None:
        name = decisions.next_to_stop(self.ordered())
        if name is not None:
            log.info("stopping %s (pid %d)", name, self.parts[name].pid)
            self.parts[name] = decisions.asked_to_stop(self.parts[name], "hold", now)
            self.send_stop(name)

    # -- requests -------------------------------------------------------------------

    def answer_requests(self, now: float) -> None:
        for request in mailbox.take(self.data_dir, tuple(self.parts)):
            if isinstance(request, mailbox.BadRequestError):
                log.info("ignored a request: %s", request)
                continue
            action = request.action
            if action == "add-agent":
                if request.agent is not None:
                    self.add_agent(request.agent)
                continue
            if action == "remove-agent":
                self.remove_agents(request.parts, now)
                continue
            for name in request.parts:
                self.parts[name], send_stop = decisions.requested(self.parts[name], action, now)
                log.info("asked to %s %s", request.action, name)
                if send_stop:
                    self.send_stop(name)

    def add_agent(self, agent: AgentSpec) -> None:
        """Recorded in cluster.json (a new supervisor runs it too), then started
        by the next tick (its requirements run)."""
        if agent.part in self.parts or self.shutting_down:
            log.info(
                "ignored adding agent %s: part %s exists or the supervisor is stopping",
                agent.agent_id,
                agent.part,
            )
            return
        self.record = replace(self.record, agents=[*self.record.agents, asdict(agent)])
        self.record.save(self.data_dir)
        self.runner.add_agent(agent)
        self.parts[agent.part] = Part(agent.part)
        log.info(
            "added agent %s (part %s, %d CPU slots, pool %s)",
            agent.agent_id,
            agent.part,
            agent.cpu_slots,
            agent.pool_name,
        )

    def remove_agents(self, names: tuple[str, ...], now: float) -> None:
        for name in names:
            if name not in self.runner.agents:
                log.info("ignored removing %s: it is not an agent", name)
                continue
            self.removing.add(name)
            self.parts[name], send_stop = decisions.requested(self.parts[name], "stop", now)
            log.info("asked to remove agent part %s", name)
            if send_stop:
                self.send_stop(name)

    def forget_removed(self) -> None:
        """The agent parts asked to go that have stopped: out of the status and the record."""
        for name in [name for name in self.removing if not self.parts[name].pid]:
            self.removing.discard(name)
            del self.parts[name]
            self.runner.remove_agent(name)
            self.record = replace(self.record, agents=[a for a in self.record.agents if a["part"] != name])
            self.record.save(self.data_dir)
            log.info("removed agent part %s", name)

    # -- files ------------------------------------------------------------------------

    def maintain(self, now: float) -> None:
        """Every DISK_REFRESH_S: disk use per part, and the output files rotated."""
        if now - self.maintained_at < DISK_REFRESH_S:
            return
        self.maintained_at = now
        self.disk = {name: disk_bytes(self.runner.disk_paths(name)) for name in self.parts}
        for path in self.runner.output_files(self.parts):
            if rotate_if_large(path, LOG_FILE_BYTES, LOG_FILES - 1):
                log.info("rotated %s", path)
        self.publish(now, force=True)

    def publish(self, now: float, force: bool = False) -> None:
        """Writes status.json when a part changed (and cluster.json when a pid did)."""
        parts = self.ordered()
        if parts == self.published and not force:
            return
        if [(p.name, p.pid) for p in parts] != [(p.name, p.pid) for p in self.published]:
            self._record_pids()
        self.published = parts
        status = ClusterStatus(
            os.getpid(),
            now,
            tuple(
                PartStatus(
                    p.name, p.state, p.pid, p.restarts, p.last_error, p.started_at, self.disk.get(p.name, 0)
                )
                for p in parts
            ),
        )
        write_status(status_path(self.data_dir), status)

    def _record_pids(self) -> None:
        pids = {name: part.pid for name, part in self.parts.items() if part.pid}
        ticks = {name: start_ticks(pid) or 0 for name, pid in pids.items()}
        ticks["supervisor"] = self.record.start_ticks.get("supervisor", 0)
        self.record = replace(self.record, pids=pids, start_ticks=ticks)
        self.record.save(self.data_dir)


def configure_logging(data_dir: Path) -> None:
    handler = logging.handlers.RotatingFileHandler(
        data_dir / "logs" / "supervisor.log", maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILES - 1
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.local.supervisor", description=__doc__)
    parser.add_argument("--data-dir", type=Path, required=True)
    data_dir = parser.parse_args(argv).data_dir.resolve()
    record = ClusterRecord.load(data_dir)
    if record is None:
        print(
            f"no cluster is recorded in {ClusterRecord.path(data_dir)}: start one with cluster-up",
            file=sys.stderr,
        )
        return 2
    configure_logging(data_dir)
    return Supervisor(data_dir, record).run()


if __name__ == "__main__":
    sys.exit(main())
