"""The metric families of one scrape, from what its sources read (pure).

Names and labels are the operators' contract (README, "Monitoring"): a
family is renamed never; a new one may be added.
"""

from collections.abc import Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from determined.common import states
from determined.proto import api_pb2
from services.common.job_queue import PublishedQueue
from services.gateway.features.monitoring.queries import Counts

# The states a queued job is in (services/common/job_queue.py JobView.state).
JOB_STATES = ("QUEUED", "SCHEDULED")


def log_families(log_last: int, applied: int) -> list[Metric]:
    """The log's length, and how far the projector has applied it."""
    appended = CounterMetricFamily(
        "det_events_appended", "Events appended to the log since the cluster began (its last sequence)."
    )
    appended.add_metric([], log_last)
    position = GaugeMetricFamily(
        "det_projector_applied_sequence", "The last sequence the read models hold (the projector's position)."
    )
    position.add_metric([], applied)
    return [appended, position]


def lag_families(lags: Mapping[str, int], following: Mapping[str, bool]) -> list[Metric]:
    """Each consumer's lag (the projector's included, when `lags` has it) and
    whether each service follows the log now."""
    lag = GaugeMetricFamily(
        "det_consumer_lag_events",
        "Events a consumer of the log has still to read: the projector's log end minus its position;"
        " a service's or agent's, the events of the kinds it reads that nats-server has not delivered yet.",
        labels=["consumer"],
    )
    for consumer, behind in sorted(lags.items()):
        lag.add_metric([consumer], behind)
    follows = GaugeMetricFamily(
        "det_consumer_following",
        "1 while a service (or agent) follows the log; 0 while it is down or replaying at its start.",
        labels=["consumer"],
    )
    for consumer, yes in sorted(following.items()):
        follows.add_metric([consumer], 1 if yes else 0)
    return [lag, follows]


def count_families(counts: Counts) -> list[Metric]:
    """Trials, their runs and the other tasks, by state (the read models);
    every state of the vocabulary shows, 0 when nothing is in it."""
    trials = GaugeMetricFamily("det_trials", "Trials by the state they show.", labels=["state"])
    for state, count in sorted(_every(states.TrialState, counts.trials).items()):
        trials.add_metric([state], count)
    allocations = GaugeMetricFamily(
        "det_allocations",
        "Trials' runs (allocations) by how they stand (QUEUED, RUNNING) or ended.",
        labels=["state"],
    )
    for state, count in sorted(_every(states.AllocationState, counts.allocations).items()):
        allocations.add_metric([state], count)
    tasks = GaugeMetricFamily(
        "det_tasks", "Notebooks, TensorBoards, commands and shells by state.", labels=["task_type", "state"]
    )
    every_task = {(kind, state): 0 for kind in states.TaskType for state in states.TaskState}
    for (task_type, state), count in sorted((every_task | counts.tasks).items()):
        tasks.add_metric([task_type, state], count)
    return [trials, allocations, tasks]


def agent_families(agents: list[api_pb2.Agent]) -> list[Metric]:
    """Agents by pool and state (ENABLED, DISABLED, DRAINING, LOST), and the
    slots of agents not lost, used or free."""
    by_state: dict[tuple[str, str], int] = {}
    slots: dict[tuple[str, str], int] = {}
    for agent in agents:
        key = (agent.resource_pool, agent.state)
        by_state[key] = by_state.get(key, 0) + 1
        if agent.state != "LOST":
            for use in agent.slot_uses:
                slot = (agent.resource_pool, "used" if use.allocation_id else "free")
                slots[slot] = slots.get(slot, 0) + 1
    agent_family = GaugeMetricFamily("det_agents", "Agents by state.", labels=["resource_pool", "state"])
    for (pool, state), count in sorted(by_state.items()):
        agent_family.add_metric([pool, state], count)
    slot_family = GaugeMetricFamily(
        "det_slots", "Slots of the agents not lost, used or free.", labels=["resource_pool", "state"]
    )
    for (pool, state), count in sorted(slots.items()):
        slot_family.add_metric([pool, state], count)
    return [agent_family, slot_family]


def queue_families(queue: PublishedQueue, pools: list[str]) -> list[Metric]:
    """Jobs per pool as the scheduler last published its queue: QUEUED (the
    queue's length: nothing of it holds slots) and SCHEDULED; every pool
    known shows both, 0 when it has none."""
    counts = {(pool, state): 0 for pool in pools for state in JOB_STATES}
    for job in queue.jobs:
        key = (job.resource_pool, job.state)
        counts[key] = counts.get(key, 0) + 1
    jobs = GaugeMetricFamily(
        "det_jobs",
        "Jobs in the scheduler's queue by pool: QUEUED (waiting for slots) or SCHEDULED.",
        labels=["resource_pool", "state"],
    )
    for (pool, state), count in sorted(counts.items()):
        jobs.add_metric([pool, state], count)
    return [jobs]


def gateway_families(by_type: Mapping[str, int], skipped: int) -> list[Metric]:
    """What this gateway counted: the events its projector read, by type, and
    those it could not read or apply."""
    projected = CounterMetricFamily(
        "det_events_projected",
        "Events the projector of this gateway read since it started, by type.",
        labels=["type"],
    )
    for event_type, count in sorted(by_type.items()):
        projected.add_metric([event_type], count)
    skips = CounterMetricFamily(
        "det_events_skipped", "Events this gateway could not read or apply (skipped, recorded in its report)."
    )
    skips.add_metric([], skipped)
    return [projected, skips]


def source_families(up: Mapping[str, bool]) -> list[Metric]:
    family = GaugeMetricFamily(
        "det_metrics_source_up",
        "1 when this scrape could read the source; 0 when it could not (its families are left out).",
        labels=["source"],
    )
    for source, answered in sorted(up.items()):
        family.add_metric([source], 1 if answered else 0)
    return [family]


def _every(vocabulary: Iterable[str], counts: Mapping[str, int]) -> dict[str, int]:
    return dict.fromkeys(vocabulary, 0) | dict(counts)
