"""Several agents share their slots (issue 8), end to end: `det deploy local cluster-up
--agents 2 --cpu-slots 2`, real agent processes, NATS and PostgreSQL, and the slow
checkpointing trials of `examples/scheduling`.

- fair share: two experiments of 8 one-slot trials share the 4 slots about evenly while
  both have work (measured in slot-seconds from the allocations read model);
- priority, in a pool of its own (`--pool-scheduler prio=priority`, two agents added with
  `agent-up --pool prio`): a higher-priority experiment preempts the running trials of a
  lower one, runs first, and the preempted trials resume from their checkpoints with every
  step once;
- a lost agent: an agent frozen and killed in the middle of a checkpointing trial is marked
  lost, its allocation ends "agent lost", and the trial runs again on the other agent from
  its latest checkpoint, not counted against `max_restarts: 0`.

The clusters run with a short minimum run time before preemption
(`--min-run-s`) and a short time to declare an agent lost (`--agent-lost-s`) so
that the module stays within a couple of minutes.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chaos_checks import part_status, training_steps
from support.e2e_cluster import Cluster, det, wait_for

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scheduling"
AGENTS = 2
SLOTS_PER_AGENT = 2

# Short enough to keep the module quick, long enough that a trial reports and checkpoints
# before the scheduler may preempt it, and that a busy agent is not taken for lost.
SETTINGS = ["--min-run-s", "2", "--agent-lost-s", "4"]
PRIORITY_POOL = "prio"

# Each experiment's share of the slot-seconds while both ran. An even split is 50%; the
# newcomer's further trials still wait for the first's to be preempted and exit, and whoever
# finishes last gets the whole cluster for its tail, which the window below leaves out. On a
# loaded 2-core machine that costs up to ~8 points; first come, first served would give the
# newcomer (almost) nothing.
FAIR_SHARE_FLOOR = 0.35


class AgentsCluster(Cluster):
    """A local cluster with several agents, each offering CPU slots, the pool `default`
    fair share and the pool `prio` by priority."""

    def up(self) -> subprocess.CompletedProcess[str]:
        return det(
            self.env, "deploy", "local", "cluster-up", "--data-dir", str(self.data_dir), "--no-gpu",
            "--agents", str(AGENTS), "--cpu-slots", str(SLOTS_PER_AGENT),
            "--master-port", str(self.master_port), "--nats-port", str(self.nats_port),
            "--postgres-port", str(self.postgres_port), "--pool-scheduler", f"{PRIORITY_POOL}=priority",
            *SETTINGS,
        )  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[AgentsCluster]:
    """One cluster for the module; the lost-agent test, last, takes an agent away from it
    for good."""
    running = AgentsCluster(Path("/tmp") / f"det-e2e-sched-{uuid.uuid4().hex[:8]}")
    started = running.up()
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        wait_for(lambda: len(running.json("agent", "list")) == AGENTS, "every agent to register")
        yield running
    finally:
        running.down()
        shutil.rmtree(running.data_dir, ignore_errors=True)


def config(name: str, **changes: Any) -> str:
    """examples/scheduling/search.yaml with `changes` applied (`resources__priority=10` sets
    resources.priority), as JSON (which is YAML)."""
    document = yaml.safe_load((EXAMPLE / "search.yaml").read_text())
    document["name"] = name
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return json.dumps(document)


def context(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(EXAMPLE / "slow_trial.py", folder / "slow_trial.py")
    return folder


def allocations(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    rows = cluster.query(
        "SELECT a.*, t.experiment_id FROM read_model.allocations a JOIN read_model.trials t ON t.id = a.trial_id"
        " WHERE t.experiment_id = $1 ORDER BY a.requested_at_ns",
        experiment_id,
    )
    found = []
    for row in rows:
        allocation = dict(row)
        placements = allocation["placements"]
        allocation["placements"] = json.loads(placements) if isinstance(placements, str) else placements or []
        found.append(allocation)
    return found


def slots(allocation: dict[str, Any]) -> int:
    return sum(len(placement["slot_ids"]) for placement in allocation["placements"])


def running(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    return [
        a for a in allocations(cluster, experiment_id) if a["started_at_ns"] and a["exited_at_ns"] is None
    ]


def experiment_times(cluster: Cluster, experiment_id: int) -> tuple[int, int]:
    [row] = cluster.query(
        "SELECT started_at_ns, ended_at_ns FROM read_model.experiments WHERE id = $1", experiment_id
    )
    return int(row["started_at_ns"]), int(row["ended_at_ns"])


def wait_until_completed(cluster: Cluster, *experiment_ids: int, deadline_s: float = 180) -> None:
    def ended(experiment_id: int) -> str | None:
        state = cluster.experiment_state(experiment_id)
        return state if state in ("COMPLETED", "ERROR", "CANCELED") else None

    for experiment_id in experiment_ids:
        state = wait_for(lambda: ended(experiment_id), f"experiment {experiment_id} to end", deadline_s)  # noqa: B023
        assert state == "COMPLETED", [cluster.logs(trial["id"]) for trial in cluster.trials(experiment_id)]


def check_every_step_once(cluster: Cluster, experiment_id: int, steps: int) -> None:
    for trial in cluster.trials(experiment_id):
        assert training_steps(cluster, trial["id"]) == list(range(1, steps + 1)), trial
        assert trial["restarts"] == 0, trial  # preemption and lost agents are not the trial's fault


def starts(cluster: Cluster, trial_id: int) -> list[int]:
    """The step each run of the trial started at (its "starting at step N" lines)."""
    return [
        int(line.rsplit(" ", 1)[1])
        for line in cluster.logs(trial_id).splitlines()
        if "starting at step " in line
    ]


def test_two_experiments_share_the_slots_about_evenly(cluster: AgentsCluster, tmp_path: Path) -> None:
    steps = 20
    first = cluster.create(context(tmp_path, "first"), config("fair-first", hyperparameters__steps=steps))
    wait_for(
        lambda: len(running(cluster, first)) == AGENTS * SLOTS_PER_AGENT, "the first to fill the slots", 90
    )
    second = cluster.create(context(tmp_path, "second"), config("fair-second", hyperparameters__steps=steps))
    wait_for(lambda: running(cluster, second), "the second to get slots", 60)
    jobs = {job["job_id"]: job for job in cluster.json("job", "list")["jobs"]}
    for experiment_id in (first, second):
        job = jobs[f"experiment/{experiment_id}"]
        assert job["state"] == "SCHEDULED" and job["slots_needed"] >= job["slots_acquired"] > 0, jobs
    wait_until_completed(cluster, first, second)

    # The window in which both ran: from the second's first slot to the first end. (From its
    # creation, the handover's seconds (the minimum run time, the preempted trial's checkpoint
    # and exit) weighed on a window of a few seconds as much as the sharing itself.)
    window_start = min(a["assigned_at_ns"] for a in allocations(cluster, second) if a["assigned_at_ns"])
    window_end = min(experiment_times(cluster, first)[1], experiment_times(cluster, second)[1])
    used = {}
    for experiment_id in (first, second):
        used[experiment_id] = (
            sum(
                slots(a) * max(0, min(a["exited_at_ns"], window_end) - max(a["assigned_at_ns"], window_start))
                for a in allocations(cluster, experiment_id)
                if a["assigned_at_ns"]
            )
            / 1e9
        )
    total = sum(used.values())
    shares = {experiment_id: seconds / total for experiment_id, seconds in used.items()}
    assert min(shares.values()) >= FAIR_SHARE_FLOOR, (shares, used, (window_end - window_start) / 1e9)
    # The first gave slots back through the stop-and-resume cycle, not by finishing.
    preempted = [a for a in allocations(cluster, first) if "preempted" in (a["stop_reason"] or "")]
    assert preempted, allocations(cluster, first)
    for experiment_id in (first, second):
        check_every_step_once(cluster, experiment_id, steps)


def test_priority_preempts_the_lower_one_which_resumes_later(cluster: AgentsCluster, tmp_path: Path) -> None:
    for index in range(1, AGENTS + 1):
        cluster.det(
            "deploy", "local", "agent-up", "--data-dir", str(cluster.data_dir), "--agent-id",
            f"{PRIORITY_POOL}-{index}", "--cpu-slots", str(SLOTS_PER_AGENT), "--pool", PRIORITY_POOL,
        )  # fmt: skip
    wait_for(
        lambda: (
            Counter(a["resource_pool"] or "default" for a in cluster.json("agent", "list"))
            == {"default": AGENTS, PRIORITY_POOL: AGENTS}
        ),
        "the prio pool's agents to register",
    )
    # The low trials that keep running outlast the high ones: a slot they free cannot be
    # what lets a preempted low trial back in before a high one is done. 110 steps of 0.2 s
    # leave the high trials ~17 s to start and finish theirs, even on a busy 2-core machine
    # running two test workers (45 left ~6 s: too few there). The high ones train 5 s, so
    # that a poll of the queue on a loaded machine does not miss them altogether.
    low_steps, high_steps = 110, 25
    try:
        low = cluster.create(
            context(tmp_path, "low"),
            config(
                "low",
                hyperparameters__steps=low_steps,
                searcher__max_trials=4,
                resources__priority=50,
                resources__resource_pool=PRIORITY_POOL,
            ),
        )
        wait_for(
            lambda: len(running(cluster, low)) == AGENTS * SLOTS_PER_AGENT,
            "the low one to fill the slots",
            90,
        )
        # Past the minimum run time and a first checkpoint (every 5 steps of 0.2 s).
        wait_for(
            lambda: all(len(training_steps(cluster, t["id"])) >= 7 for t in cluster.trials(low)),
            "the low trials to checkpoint",
            60,
        )
        high = cluster.create(
            context(tmp_path, "high"),
            config(
                "high",
                hyperparameters__steps=high_steps,
                searcher__max_trials=2,
                resources__priority=10,
                resources__resource_pool=PRIORITY_POOL,
            ),
        )
        # The queue serves the high one first from the moment it asks for slots.
        jobs = wait_for(lambda: prio_jobs(cluster, high), "the high one in the queue", 60)
        assert jobs and jobs[f"experiment/{high}"]["position"] < jobs[f"experiment/{low}"]["position"], jobs
        assert cluster.json("job", "list")["schedulers"][PRIORITY_POOL] == "priority"
        wait_until_completed(cluster, high, low)

        low_runs, high_runs = allocations(cluster, low), allocations(cluster, high)
        preempted = [a for a in low_runs if "preempted" in (a["stop_reason"] or "")]
        # Two slots were needed: two low trials stopped (the newest), no more.
        assert len(preempted) == 2, low_runs
        assert all(a["exit_code"] == 0 and not a["agent_lost"] for a in preempted), preempted
        high_assigned = max(a["assigned_at_ns"] for a in high_runs)
        high_first_exit = min(a["exited_at_ns"] for a in high_runs)
        for stopped in preempted:
            [resumed] = [
                a
                for a in low_runs
                if a["trial_id"] == stopped["trial_id"] and a["trial_run_id"] == stopped["trial_run_id"] + 1
            ]
            # The high one ran first; the low one got its slots back only when it was done with them.
            assert resumed["assigned_at_ns"] > high_assigned, (resumed, high_runs)
            assert resumed["assigned_at_ns"] >= high_first_exit, (resumed, high_runs)
            # ... and resumed from its checkpoint, not from the start.
            first_start, second_start = starts(cluster, stopped["trial_id"])
            assert first_start == 0 and second_start >= 5, cluster.logs(stopped["trial_id"])
        check_every_step_once(cluster, low, low_steps)
        check_every_step_once(cluster, high, high_steps)
    finally:
        for index in range(1, AGENTS + 1):
            cluster.det(
                "deploy",
                "local",
                "agent-down",
                "--data-dir",
                str(cluster.data_dir),
                "--agent-id",
                f"{PRIORITY_POOL}-{index}",
            )


def prio_jobs(cluster: Cluster, experiment_id: int) -> dict[str, Any] | None:
    """The prio pool's queue by job id, once the experiment's trials are in it."""
    jobs = {job["job_id"]: job for job in cluster.jobs(PRIORITY_POOL)}
    return jobs if f"experiment/{experiment_id}" in jobs else None


def agent_part(cluster: Cluster, agent_id: str) -> str:
    """The supervisor's part that runs this agent: cluster-up --agents N names both agent-<n>."""
    status = json.loads((cluster.data_dir / "run" / "status.json").read_text())
    [name] = [part["name"] for part in status["parts"] if part["name"] == agent_id]
    return str(name)


def lose(cluster: Cluster, part: str) -> None:
    """Takes an agent away as a dead machine would: frozen (no more heartbeats), held down
    by the supervisor so that it is not started again, then killed with SIGKILL (its trial
    processes die with it)."""
    pid = part_status(cluster.data_dir, part)["pid"]
    os.kill(pid, signal.SIGSTOP)
    stopping = subprocess.Popen(
        [sys.executable, "-m", "determined.cli", "deploy", "local", "stop-service", part,
         "--data-dir", str(cluster.data_dir)],
        env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        supervisor_log = cluster.data_dir / "logs" / "supervisor.log"
        wait_for(
            lambda: f"asked to stop {part}" in supervisor_log.read_text(),
            "the supervisor to hold it down",
            30,
        )
        os.kill(pid, signal.SIGKILL)
        assert stopping.wait(60) == 0, stopping.stdout.read() if stopping.stdout else ""
    finally:
        if stopping.poll() is None:
            stopping.kill()
            stopping.wait()


def test_a_lost_agent_s_trial_resumes_on_the_other_agent(cluster: AgentsCluster, tmp_path: Path) -> None:
    steps = 50
    single = {"name": "single", "metric": "validation_loss", "smaller_is_better": True}
    experiment_id = cluster.create(
        context(tmp_path, "lost"),
        config("lost-agent", hyperparameters__steps=steps, hyperparameters__x=0.5, searcher=single),
    )
    [trial] = wait_for(lambda: cluster.trials(experiment_id), "the trial")
    trial_id = trial["id"]
    wait_for(lambda: len(training_steps(cluster, trial_id)) >= 12, "the trial to checkpoint twice", 90)
    [first_run] = allocations(cluster, experiment_id)
    [placement] = first_run["placements"]
    lost_agent = placement["agent_id"]

    lose(cluster, agent_part(cluster, lost_agent))

    def first_run_ended() -> dict[str, Any] | None:
        [run] = [
            a for a in allocations(cluster, experiment_id) if a["allocation_id"] == first_run["allocation_id"]
        ]
        return run if run["exited_at_ns"] else None

    # --agent-lost-s (4 s) after its last heartbeat, with slack for a loaded machine.
    ended = wait_for(first_run_ended, "the allocation to end with its agent", 20)
    assert ended is not None and ended["agent_lost"], ended
    assert (ended["error"] or "").startswith(f"agent {lost_agent} lost"), ended
    agents = {a["agent_id"]: a for a in cluster.json("agent", "list")}
    assert agents[lost_agent]["state"].lower() == "lost", agents

    wait_until_completed(cluster, experiment_id)
    runs = allocations(cluster, experiment_id)
    assert len(runs) == 2, runs
    [again] = runs[1]["placements"]
    assert again["agent_id"] != lost_agent, runs
    first_start, second_start = starts(cluster, trial_id)
    assert first_start == 0 and second_start >= 10, cluster.logs(trial_id)
    check_every_step_once(cluster, experiment_id, steps)
    described = cluster.json("trial", "describe", str(trial_id))
    assert described["trial"]["state"] == "COMPLETED" and described["trial"]["restarts"] == 0, described
    # The user sees how each run ended.
    assert [(r["state"], r["agent_ids"]) for r in described["runs"]] == [
        ("AGENT_LOST", [lost_agent]),
        ("COMPLETED", [again["agent_id"]]),
    ], described["runs"]
    # And the log says why run 2 was asked for.
    chain, outcome = cluster.explain("trial", trial_id)
    [_, second] = [reason for _, event_type, reason in chain if event_type == "allocation_requested"]
    assert second.startswith(
        f"trial {trial_id} run 2: resumes after run 1 lost its agent (agent {lost_agent} lost"
    )
    assert outcome == "completed: its code finished"
