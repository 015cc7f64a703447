"""The scheduler's pure core on a simulated cluster: time per decision.

A decision is what the scheduler's Shell does for each event it reads:
fold the event (`evolve`), then `decide`. The cluster is `--agents` agents
x `--slots` slots in one pool, every slot busy with a 1-slot trial of one of
`--experiments` experiments, and `--queued` more trials waiting. The events
timed are the ones such a cluster sees: an allocation exits (the decision
assigns its slot to a waiting trial, whose assignment is folded too), a new
trial is requested, a stop is requested. The first line is the issue's
figure (1,000 x 8 slots, 10,000 queued); the others show how it grows with
agents and with the queue.

    python bench/scheduler.py [--decisions 300] [--scheduler fair_share|priority] [--only-main]
"""

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from google.protobuf.message import Message

from determined.proto import events_pb2
from services.common.envelope import Append, aggregate, subject_kind, wrap
from services.common.scheduling import DEFAULT_WEIGHT
from services.scheduler.config import SchedulerConfig
from services.scheduler.core import SchedulerCore, SchedulerState

S = 10**9


class Cluster:
    def __init__(self, core: SchedulerCore) -> None:
        self.core = core
        self.state: SchedulerState = core.initial_state()
        self.now_ns = 1_790_000_000 * S
        self.ids = itertools.count()

    def fold(self, payload: Message) -> None:
        self.now_ns += 10**6
        kind = subject_kind(payload)
        key = getattr(payload, "agent_id" if kind == "agent" else "allocation_id")
        append = Append(aggregate(kind, key), payload, f"e-{next(self.ids)}")
        self.state = self.core.evolve(self.state, wrap(append, actor="bench", occurred_at_ns=self.now_ns))

    def settle(self) -> list[Append]:
        decided = []
        while appends := self.core.decide(self.state):
            for append in appends:
                self.fold(append.payload)
            decided += appends
        return decided


def request(trial: int, experiments: int) -> events_pb2.AllocationRequested:
    experiment = trial % experiments + 1
    return events_pb2.AllocationRequested(
        allocation_id=f"{trial}.1",
        task_id=str(trial),
        task_type="TRIAL",
        slots=1,
        job_id=f"experiment/{experiment}",
        weight=DEFAULT_WEIGHT,
        preemptible=True,
        trial=events_pb2.TrialLaunch(experiment_id=experiment, trial_id=trial, trial_run_id=1),
    )


def cluster(core: SchedulerCore, agents: int, slots: int, queued: int, experiments: int) -> Cluster:
    c = Cluster(core)
    for a in range(agents):
        slot_list = [events_pb2.Slot(slot_id=i, type="cpu") for i in range(slots)]
        c.fold(events_pb2.AgentRegistered(agent_id=f"agent-{a:04}", hostname=f"host-{a}", slots=slot_list))
    for trial in range(agents * slots):
        c.fold(request(trial, experiments))
    c.settle()
    for trial in range(agents * slots, agents * slots + queued):
        c.fold(request(trial, experiments))
    return c


def measure(args: argparse.Namespace, agents: int, queued: int) -> tuple[float, float, float]:
    """p50, p99 and max milliseconds per decision."""
    config = SchedulerConfig(default_type=args.scheduler, min_run_s=0)
    started = time.perf_counter()
    c = cluster(SchedulerCore(config), agents, args.slots, queued, args.experiments)
    setup = time.perf_counter() - started
    times = []
    next_trial = agents * args.slots + queued
    for n in range(args.decisions):
        running = next(r for r in c.state.requests.values() if r.assigned and not r.withdrawn)
        trial = int(running.requested.task_id)
        match n % 3:
            case 0:
                event = events_pb2.AllocationExited(allocation_id=running.allocation_id, task_id=str(trial))
            case 1:
                event = request(next_trial, args.experiments)
                next_trial += 1
            case _:
                event = events_pb2.AllocationStopRequested(
                    allocation_id=running.allocation_id, task_id=str(trial)
                )
        t0 = time.perf_counter()
        c.fold(event)
        appends = c.core.decide(c.state)
        times.append(time.perf_counter() - t0)
        for append in appends:  # what the Shell folds next, each followed by its own decide
            t0 = time.perf_counter()
            c.fold(append.payload)
            c.core.decide(c.state)
            times.append(time.perf_counter() - t0)
    ms = sorted(t * 1000 for t in times)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{agents:>6} agents x {args.slots}  {queued:>6} queued  {len(ms):>5} decisions:"
        f"  p50 {statistics.median(ms):7.2f} ms  p99 {p99:7.2f} ms  max {ms[-1]:7.2f} ms  (setup {setup:.0f} s)",
        flush=True,
    )
    return statistics.median(ms), p99, ms[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=300, help="events timed per cluster")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--experiments", type=int, default=50, help="jobs sharing the pool")
    parser.add_argument("--scheduler", default="fair_share", choices=["fair_share", "priority"])
    parser.add_argument("--only-main", action="store_true", help="only 1,000 agents with 10,000 queued")
    args = parser.parse_args()
    print(f"scheduler core, {args.scheduler}, {args.experiments} experiments, 1-slot trials")
    measure(args, 1000, 10_000)
    if args.only_main:
        return
    for agents in (100, 300):
        measure(args, agents, 10_000)
    for queued in (1_000, 3_000, 30_000):
        measure(args, 1000, queued)


if __name__ == "__main__":
    main()
