"""A realistic event log for the recovery benchmarks: a busy cluster's
history, appended to one namespace of a nats-server.

The log is what a real cluster writes, because the real deciders write it:
the searcher's two cores (services/searcher: ASHA, random and single searches,
each trial's lifecycle) and the scheduler run here in-process, folding every
event and deciding exactly as their Shell does, against a simulated agent
(4 agents x 4 CPU slots) whose trial processes report through the gateway's
own command functions (services/gateway/features/*/commands.py): metric batches,
validations, progress, checkpoints, stop acknowledgements, exits. Users keep
three experiments going, now and then pause and resume one, kill one or a
trial. A few runs fail and are restarted from their checkpoint (their later
points superseded), a few trials report invalid hyperparameters. Time is
simulated (event times are the simulation's), and a fixed seed gives the
same log. The log is cut only between two steps of the simulation, so every
decision the cores would make is in it: a service that replays it decides
nothing new.

A trial reports one training point every `report_every` batches (1 to 10 per
experiment), sent alone as the harness's sender does when a batch takes
longer than a round trip; validates every 50 batches and at the length the
searcher gave it; checkpoints every 100 batches and when it stops.

    python bench/gen_log.py --nats-url nats://127.0.0.1:4222 --namespace bench --events 1000000

Prints what it appended, by event type, and how fast.
"""

import argparse
import asyncio
import collections
import heapq
import json
import random
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import nats
from google.protobuf import json_format

from determined.proto import api_pb2, events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, subject_for, wrap
from services.common.eventstore import EventStore
from services.gateway.features.checkpoints import commands as checkpoint_commands
from services.gateway.features.experiments import commands as experiment_commands
from services.gateway.features.trials import commands as trial_commands
from services.scheduler.core import SchedulerCore
from services.searcher.core import TERMINAL_EXPERIMENT_STATES, SearcherCore
from services.searcher.lifecycle import TrialLifecycleCore

START_NS = 1_790_000_000 * 10**9
S = 10**9
AGENTS = 4
SLOTS_PER_AGENT = 4
CONCURRENT_EXPERIMENTS = 3
VALIDATION_PERIOD = 50
CHECKPOINT_PERIOD = 100
# How long a trial that reached its length waits for the searcher (a longer
# length, or a stop) before its script ends on its own.
WAIT_FOR_SEARCHER_S = 60
PUBLISH_WINDOW = 2000

SEARCHERS = {
    "adaptive_asha": "name: adaptive_asha\n  time_metric: batches\n  max_time: {max_time}\n"
    "  max_trials: {max_trials}\n  max_concurrent_trials: 8",
    "random": "name: random\n  max_length: {{batches: {max_time}}}\n  max_trials: {max_trials}\n"
    "  max_concurrent_trials: 4",
    "single": "name: single\n  max_length: {{batches: {max_time}}}",
}
CONFIG = """name: bench-{number}
description: {searcher} search {number}
labels: [bench, {searcher}]
entrypoint: python3 train.py
max_restarts: 3
hyperparameters:
  global_batch_size: 64
  learning_rate: {{type: log, minval: -4, maxval: -1, base: 10}}
  hidden: {{type: int, minval: 32, maxval: 512}}
  dropout: {{type: double, minval: 0.0, maxval: 0.5}}
  optimizer: {{type: categorical, vals: [sgd, adam, adamw]}}
searcher:
  metric: validation_loss
  {searcher_yaml}
"""


# What the cluster appends: (aggregate, envelope bytes, headers), with the
# headers EventStore.append sends (so a reader parses what it would on a cluster).
LogEntry = tuple[str, bytes, dict[str, str]]


@dataclass
class CoreRunner:
    core: PureCore[Any]
    actor: str
    state: Any = None

    def __post_init__(self) -> None:
        self.state = self.core.initial_state()


@dataclass
class Run:
    """A trial process of one allocation, on a simulated agent."""

    launch: events_pb2.TrialLaunch
    allocation_id: str
    agent_id: str
    steps: int
    length: int
    report_every: int
    batch_s: float
    hparams: dict[str, Any]
    fails_at: int | None
    invalid_hp: bool
    batch_seq: int = 0
    stop: str | None = None
    waiting_since: int | None = None
    exiting: bool = False


@dataclass
class ExperimentPlan:
    experiment_id: int
    report_every: int
    batch_s: float
    pause_at_s: float | None
    kill_at_s: float | None


@dataclass(order=True)
class Timer:
    at: int
    order: int
    action: Callable[[], None] = field(compare=False)


class Cluster:
    """The simulation: cores, agent, trial processes and users, on one clock."""

    def __init__(self, seed: int, incidents: float = 1.0) -> None:
        self.rng = random.Random(seed)
        # Multiplies how often pauses, kills, failures and invalid
        # hyperparameters happen (a test log wants more of them).
        self.incidents = incidents
        self.now = START_NS
        self.searcher = CoreRunner(SearcherCore(), "service:searcher")
        self.lifecycle = CoreRunner(TrialLifecycleCore(), "service:searcher")
        self.scheduler = CoreRunner(SchedulerCore(), "service:scheduler")
        self.runners = [self.searcher, self.lifecycle, self.scheduler]
        self.read_kinds = {kind for runner in self.runners for kind in runner.core.kinds}
        self.out: list[LogEntry] = []
        self.sequence = 0
        self.versions: dict[str, int] = {}
        self.timers: list[Timer] = []
        self.timer_order = 0
        self.launches: dict[str, events_pb2.TrialLaunch] = {}
        self.runs: dict[str, Run] = {}
        self.current_run: dict[int, str] = {}
        self.searcher_stopped: set[int] = set()
        # Trial id -> the progress values it reported (their message ids are taken).
        self.progress_reported: dict[int, set[float]] = {}
        self.experiments: dict[int, ExperimentPlan] = {}
        self.next_experiment = 1
        self.creating = True
        self._cause: Envelope | None = None

    # -- the log ----------------------------------------------------------------

    def emit(self, append: Append, actor: str) -> Envelope:
        """Appends one event: folds it into every core that reads its kind and
        lets the agent, its trial processes and the users react."""
        if self._cause is not None and not append.causation_id:
            append = Append(
                append.aggregate,
                append.payload,
                append.msg_id,
                append.expected_version,
                self._cause.event_id,
                self._cause.correlation_id or self._cause.event_id,
            )
        envelope = wrap(append, actor=actor, occurred_at_ns=self.now)
        self.sequence += 1
        self.versions[append.aggregate] = self.sequence
        headers = {"Nats-Msg-Id": append.msg_id}
        if append.expected_version is not None:
            headers["Nats-Expected-Last-Subject-Sequence"] = str(append.expected_version)
        self.out.append((append.aggregate, envelope.SerializeToString(), headers))
        kind = append.aggregate.partition("/")[0]
        for runner in self.runners:
            if kind in runner.core.kinds:
                runner.state = runner.core.evolve(runner.state, envelope)
        self._react(envelope)
        return envelope

    def settle(self, cause: Envelope | None = None) -> None:
        """Lets every core decide until none has anything to say, as each
        Shell does once caught up."""
        self._cause = cause
        for _ in range(10_000):
            decided = False
            for runner in self.runners:
                for append in runner.core.decide(runner.state):
                    self.emit(append, runner.actor)
                    decided = True
            if not decided:
                self._cause = None
                return
        raise RuntimeError("the cores' decisions did not settle")

    def step(self, append: Append, actor: str) -> Envelope:
        """An event from outside the cores (a user, the agent, a trial), and
        what the cores decide about it."""
        envelope = self.emit(append, actor)
        if append.aggregate.partition("/")[0] in self.read_kinds:
            self.settle(envelope)
        return envelope

    def later(self, seconds: float, action: Callable[[], None]) -> None:
        self.timer_order += 1
        heapq.heappush(self.timers, Timer(self.now + int(seconds * S), self.timer_order, action))

    def run(self) -> Iterator[list[LogEntry]]:
        """Runs the simulation; yields the events of each step as they come."""
        for number in range(AGENTS):
            self._register_agent(f"agent-{number}")
        for _ in range(CONCURRENT_EXPERIMENTS):
            self._create_experiment()
        while self.timers:
            timer = heapq.heappop(self.timers)
            self.now = max(self.now, timer.at)
            timer.action()
            if self.out:
                yield self.out
                self.out = []

    # -- users ------------------------------------------------------------------

    def _create_experiment(self) -> None:
        if not self.creating:
            return
        number = self.next_experiment
        self.next_experiment += 1
        searcher = self.rng.choices(list(SEARCHERS), weights=[70, 20, 10])[0]
        max_time = (
            self.rng.choice([400, 800, 1600]) if searcher == "adaptive_asha" else self.rng.choice([200, 400])
        )
        searcher_yaml = SEARCHERS[searcher].format(
            max_time=max_time, max_trials=self.rng.choice([16, 32, 64])
        )
        config_yaml = CONFIG.format(number=number, searcher=searcher, searcher_yaml=searcher_yaml)
        config = experiment_commands.validate_config(
            config_yaml,
            checkpoint_host_path="/data/checkpoints",
            experiment_seed=self.rng.randrange(2**31),
            name=f"bench-{number}",
        )
        request_id = uuid.UUID(int=self.rng.getrandbits(128)).hex
        created = experiment_commands.experiment_created(
            number,
            request_id,
            config,
            owner="determined",
            context_hash=f"{self.rng.getrandbits(256):064x}",
            context_size=self.rng.randrange(10_000, 5_000_000),
            activate=True,
        )
        self.experiments[number] = ExperimentPlan(
            number,
            report_every=self.rng.choice([5, 10, 20, 50]),
            batch_s=self.rng.uniform(0.05, 0.5),
            pause_at_s=self.rng.uniform(60, 3600) / self.incidents if self._incident(0.05) else None,
            kill_at_s=self.rng.uniform(60, 3600) / self.incidents if self._incident(0.03) else None,
        )
        plan = self.experiments[number]
        if plan.pause_at_s is not None:
            self.later(plan.pause_at_s, lambda: self._pause(number))
        if plan.kill_at_s is not None:
            self.later(plan.kill_at_s, lambda: self._kill(number))
        self.step(created, "user:determined")

    def _incident(self, probability: float) -> bool:
        return self.rng.random() < probability * self.incidents

    def _pause(self, experiment_id: int) -> None:
        if experiment_id not in self.experiments:
            return
        append = experiment_commands.paused(
            experiment_id, "ACTIVE", self.versions[f"experiment/{experiment_id}"]
        )
        if isinstance(append, Append):
            self.step(append, "user:determined")
            self.later(self.rng.uniform(30, 600), lambda: self._activate(experiment_id))

    def _activate(self, experiment_id: int) -> None:
        if experiment_id not in self.experiments:
            return
        append = experiment_commands.activated(
            experiment_id, "PAUSED", self.versions[f"experiment/{experiment_id}"]
        )
        if isinstance(append, Append):
            self.step(append, "user:determined")

    def _kill(self, experiment_id: int) -> None:
        if experiment_id in self.experiments:
            append = experiment_commands.kill_requested(experiment_id, "ACTIVE")
            if isinstance(append, Append):
                self.step(append, "user:determined")

    def _kill_trial(self, trial_id: int, experiment_id: int) -> None:
        if trial_id in self.current_run:
            append = trial_commands.trial_kill_requested(trial_id, experiment_id, "ACTIVE")
            if isinstance(append, Append):
                self.step(append, "user:determined")

    # -- the agent and its trial processes ----------------------------------------

    def _register_agent(self, agent_id: str) -> None:
        slots = [events_pb2.Slot(slot_id=n, type="cpu", device=f"cpu{n}") for n in range(SLOTS_PER_AGENT)]
        event = events_pb2.AgentRegistered(agent_id=agent_id, hostname=agent_id, slots=slots)
        self.step(
            Append(
                f"agent/{agent_id}", event, f"agent-registered-{agent_id}-{self.rng.getrandbits(48):012x}"
            ),
            "service:agent",
        )

    def _react(self, envelope: Envelope) -> None:
        field_name = envelope.WhichOneof("payload")
        event = getattr(envelope, field_name)
        match field_name:
            case "allocation_requested" if event.HasField("trial"):
                self.launches[event.allocation_id] = event.trial
                self.current_run[event.trial.trial_id] = event.allocation_id
            case "allocation_assigned":
                agent_id = event.placements[0].agent_id
                self.later(self.rng.uniform(0.5, 3.0), lambda: self._start(event.allocation_id, agent_id))
            case "allocation_stop_requested":
                run = self.runs.get(event.allocation_id)
                if run is not None:
                    run.stop = event.reason
                    if run.waiting_since is not None:
                        self.later(0.05, lambda: self._tick(run))
            case "allocation_stop_withdrawn":
                run = self.runs.get(event.allocation_id)
                if run is not None and not run.exiting:
                    run.stop = None  # activated again before the trial acted on the pause
            case "allocation_kill_requested":
                run = self.runs.get(event.allocation_id)
                if run is not None and not run.exiting:
                    run.exiting = True
                    self.later(0.3, lambda: self._exit(run, exit_code=-15, killed=True))
            case "trial_length_set":
                run = self.runs.get(self.current_run.get(event.trial_id, ""))
                if run is not None:
                    run.length = max(run.length, event.length)
                    if run.waiting_since is not None:
                        self.later(0.05, lambda: self._tick(run))
            case "trial_stop_requested":
                self.searcher_stopped.add(event.trial_id)
            case "trial_ended":
                self.current_run.pop(event.trial_id, None)
                self.searcher_stopped.discard(event.trial_id)
                self.progress_reported.pop(event.trial_id, None)
            case "experiment_state_changed" if event.state in TERMINAL_EXPERIMENT_STATES:
                self.experiments.pop(event.experiment_id, None)
                self.later(self.rng.uniform(10, 600), self._create_experiment)

    def _start(self, allocation_id: str, agent_id: str) -> None:
        launch = self.launches.pop(allocation_id, None)
        plan = self.experiments.get(launch.experiment_id) if launch is not None else None
        if launch is None or plan is None or self.current_run.get(launch.trial_id) != allocation_id:
            return
        length = launch.searcher_length or 100
        run = Run(
            launch,
            allocation_id,
            agent_id,
            steps=launch.steps_completed,
            length=length,
            report_every=plan.report_every,
            batch_s=plan.batch_s,
            hparams=json.loads(launch.hparams_json),
            fails_at=launch.steps_completed + self.rng.randrange(1, 200) if self._incident(0.02) else None,
            invalid_hp=self._incident(0.005),
        )
        self.runs[allocation_id] = run
        started = events_pb2.AllocationStarted(
            allocation_id=allocation_id,
            trial_id=launch.trial_id,
            agent_id=agent_id,
            pid=self.rng.randrange(1000, 99999),
        )
        self.step(
            Append(f"allocation/{allocation_id}", started, f"allocation-started-{allocation_id}"),
            "service:agent",
        )
        if launch.trial_run_id == 1 and self.rng.random() < 0.1:
            self._trial_status(run, "loading data")
        if self._incident(0.001):
            self.later(
                self.rng.uniform(1, 100), lambda: self._kill_trial(launch.trial_id, launch.experiment_id)
            )
        self.later(self.rng.uniform(2, 10), lambda: self._tick(run))

    def _tick(self, run: Run) -> None:
        """One report's worth of training, or the end of the run."""
        if run.exiting:
            return
        if run.stop is not None:
            self._stop(run)
            return
        if run.invalid_hp:
            self._early_exit(run)
            return
        if run.steps >= run.length:
            if run.waiting_since is None:
                run.waiting_since = self.now
                self.later(WAIT_FOR_SEARCHER_S, lambda: self._tick(run))
            elif self.now - run.waiting_since >= WAIT_FOR_SEARCHER_S * S:
                self._exit(run, exit_code=0)
            return
        run.waiting_since = None
        steps = min(run.steps + run.report_every, run.length)
        trained_s = (steps - run.steps) * run.batch_s
        run.steps = steps
        if run.fails_at is not None and steps >= run.fails_at:
            run.exiting = True
            self._exit(
                run, exit_code=1, error="RuntimeError: CUDA error: an illegal memory access was encountered"
            )
            return
        self._report(
            run,
            "training",
            {
                "loss": self._loss(run),
                "accuracy": 1 - self._loss(run) / 3,
                "learning_rate": run.hparams.get("learning_rate", 0.01),
                "grad_norm": round(self.rng.uniform(0.1, 5), 4),
            },
        )
        if steps % VALIDATION_PERIOD == 0 or steps == run.length:
            self._report(
                run,
                "validation",
                {
                    "validation_loss": self._loss(run) * 1.1,
                    "validation_accuracy": 1 - self._loss(run) / 2.5,
                    "batches": steps,
                },
            )
            self._progress(run)
        if steps % CHECKPOINT_PERIOD == 0:
            self._checkpoint(run)
        self.later(trained_s, lambda: self._tick(run))

    def _loss(self, run: Run) -> float:
        quality = abs(run.hparams.get("learning_rate", 0.01) - 0.003) * 50 + run.hparams.get("dropout", 0.2)
        return round((0.2 + quality) * (1 + 30 / (run.steps + 10)) + self.rng.gauss(0, 0.01), 6)

    def _report(self, run: Run, group: str, metrics: dict[str, Any]) -> None:
        run.batch_seq += 1
        report = events_pb2.MetricReport(
            group=group, steps_completed=run.steps, metrics_json=json.dumps(metrics), reported_at_ns=self.now
        )
        request = api_pb2.ReportMetricsRequest(
            trial_id=run.launch.trial_id,
            trial_run_id=run.launch.trial_run_id,
            batch_seq=run.batch_seq,
            reporter_id=run.allocation_id,
            reports=[report],
        )
        for append in trial_commands.metrics_reported(request, run.launch.experiment_id):
            self.step(append, f"trial:{run.launch.trial_id}")

    def _progress(self, run: Run) -> None:
        """The trial's progress, when it moved to a value it did not report
        before (a longer length makes it go back): one report per value, as
        the logs this benchmark has always generated; each its own message id."""
        progress = round(min(run.steps / max(run.length, 1), 1.0), 2)
        reported = self.progress_reported.setdefault(run.launch.trial_id, set())
        if progress not in reported:
            reported.add(progress)
            request = api_pb2.ReportProgressRequest(
                trial_id=run.launch.trial_id, progress=progress, reporter_id="gen", seq=len(reported)
            )
            self.step(
                trial_commands.progress_reported(request, run.launch.experiment_id),
                f"trial:{run.launch.trial_id}",
            )

    def _trial_status(self, run: Run, status: str) -> None:
        event = events_pb2.TrialStatusReported(
            trial_id=run.launch.trial_id, experiment_id=run.launch.experiment_id, status=status
        )
        self.step(
            Append(
                f"trial/{run.launch.trial_id}", event, f"status-{run.launch.trial_id}-{run.allocation_id}-1"
            ),
            f"trial:{run.launch.trial_id}",
        )

    def _checkpoint(self, run: Run) -> None:
        checkpoint_uuid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        request = api_pb2.ReportCheckpointRequest(
            trial_id=run.launch.trial_id,
            allocation_id=run.allocation_id,
            uuid=checkpoint_uuid,
            steps_completed=run.steps,
            metadata_json=json.dumps({"steps_completed": run.steps, "framework": "torch-2.13.0"}, indent=2),
            resources={
                "model.pt": self.rng.randrange(10**6, 10**8),
                "optimizer.pt": self.rng.randrange(10**6, 10**8),
                "metadata.json": 64,
            },
        )
        append = checkpoint_commands.checkpoint_reported(
            request, run.launch.experiment_id, reported_at_ns=self.now
        )
        self.step(append, f"trial:{run.launch.trial_id}")

    def _stop(self, run: Run) -> None:
        """Asked to stop: a pause (or preemption) is acknowledged so that the
        trial resumes later; the searcher's stop is not (the trial is done)."""
        run.exiting = True
        if run.launch.trial_id not in self.searcher_stopped:
            ack = events_pb2.AllocationStopAcknowledged(
                allocation_id=run.allocation_id, task_id=str(run.launch.trial_id)
            )
            self.step(
                Append(f"allocation/{run.allocation_id}", ack, f"stop-ack-{run.allocation_id}"),
                f"trial:{run.launch.trial_id}",
            )
            self._checkpoint(run)
        elif self.rng.random() < 0.5:
            self._checkpoint(run)
        self.later(self.rng.uniform(0.5, 2), lambda: self._exit(run, exit_code=0))

    def _early_exit(self, run: Run) -> None:
        run.exiting = True
        event = events_pb2.TrialEarlyExitReported(
            trial_id=run.launch.trial_id, experiment_id=run.launch.experiment_id, reason="INVALID_HP"
        )
        self.step(
            Append(f"trial/{run.launch.trial_id}", event, f"early-exit-{run.launch.trial_id}"),
            f"trial:{run.launch.trial_id}",
        )
        self.later(0.5, lambda: self._exit(run, exit_code=0))

    def _exit(self, run: Run, exit_code: int, killed: bool = False, error: str = "") -> None:
        if self.runs.pop(run.allocation_id, None) is None:
            return
        run.exiting = True
        event = events_pb2.AllocationExited(
            allocation_id=run.allocation_id,
            trial_id=run.launch.trial_id,
            experiment_id=run.launch.experiment_id,
            agent_id=run.agent_id,
            exit_code=exit_code,
            killed=killed,
            error=error,
            task_id=str(run.launch.trial_id),
        )
        self.step(
            Append(f"allocation/{run.allocation_id}", event, f"allocation-exited-{run.allocation_id}"),
            "service:agent",
        )


def generate(events: int, seed: int = 0, incidents: float = 1.0) -> Iterator[LogEntry]:
    """(aggregate, envelope bytes, headers) of a log of about `events` events: it ends
    between two steps of the simulation, at the first after `events`."""
    cluster = Cluster(seed, incidents)
    produced = 0
    for step in cluster.run():
        yield from step
        produced += len(step)
        if produced >= events:
            return


@dataclass
class Appended:
    events: int
    seconds: float
    by_type: dict[str, int]


async def append_log(
    nats_url: str, namespace: str, events: int, seed: int = 0, incidents: float = 1.0
) -> Appended:
    """Generates the log and appends it with pipelined publishes (at most
    PUBLISH_WINDOW unacknowledged), creating the streams if needed."""
    store = await EventStore.connect(nats_url, namespace, name="bench-gen-log")
    await store.close()
    nc = await nats.connect(nats_url, name="bench-gen-log")
    js = nc.jetstream(timeout=30)
    stream = store.events_stream
    by_type: collections.Counter[str] = collections.Counter()
    pending: list[asyncio.Future[Any]] = []
    started = time.monotonic()
    count = 0
    try:
        for aggregate_name, data, headers in generate(events, seed, incidents):
            by_type[Envelope.FromString(data).WhichOneof("payload") or "?"] += 1
            subject = subject_for(namespace, aggregate_name)
            pending.append(await js.publish_async(subject, data, stream=stream, headers=headers))
            count += 1
            if len(pending) >= PUBLISH_WINDOW:
                await _acked(pending)
            if count % 100_000 == 0:
                print(
                    f"# {count:,} events appended ({time.monotonic() - started:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
        await _acked(pending)
    finally:
        await nc.drain()
    return Appended(count, time.monotonic() - started, dict(by_type))


async def _acked(pending: list[asyncio.Future[Any]]) -> None:
    """Waits for every pending publish (nats-py never resolves a refused one:
    hence the timeout, see INFRA-NOTES)."""
    await asyncio.wait_for(asyncio.gather(*pending), timeout=60)
    pending.clear()


def describe(appended: Appended) -> str:
    rate = appended.events / appended.seconds
    lines = [f"appended {appended.events:,} events in {appended.seconds:.1f} s ({rate:,.0f} events/s)"]
    for name, count in sorted(appended.by_type.items(), key=lambda item: -item[1]):
        lines.append(f"  {name:32} {count:>9,}  {100 * count / appended.events:5.1f} %")
    return "\n".join(lines)


def write_jsonl(path: str, events: int, seed: int, incidents: float) -> int:
    """Writes the log as `python -m services.eventlog` prints one (the golden
    logs' format): one envelope per line with its sequence."""
    count = 0
    with open(path, "w") as out:
        for count, (_, data, _) in enumerate(generate(events, seed, incidents), start=1):
            fields = json_format.MessageToDict(Envelope.FromString(data), preserving_proto_field_name=True)
            out.write(json.dumps({"sequence": count, **fields}) + "\n")
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats-url", help="append to this nats-server")
    parser.add_argument("--namespace", default="det")
    parser.add_argument("--jsonl", help="write the log to this file instead (JSON lines)")
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--incidents",
        type=float,
        default=1.0,
        help="multiplies how often pauses, kills, failures and invalid hyperparameters happen",
    )
    args = parser.parse_args()
    if args.jsonl:
        print(
            f"wrote {write_jsonl(args.jsonl, args.events, args.seed, args.incidents):,} events to {args.jsonl}"
        )
    elif args.nats_url:
        appended = asyncio.run(
            append_log(args.nats_url, args.namespace, args.events, args.seed, args.incidents)
        )
        print(describe(appended))
    else:
        parser.error("give --nats-url or --jsonl")


if __name__ == "__main__":
    main()
