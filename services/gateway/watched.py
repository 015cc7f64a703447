"""What the projector wakes once a batch of events is stored
(Projector.watching): the long polls' aggregates (`polled`: WatchAllocation)
and the web UI's live pages (`shown`: http/live.py). Pure; each feature says
which of its events change what (features/feature.py).
"""

import functools
from collections.abc import Iterable
from typing import Any

from services.common.envelope import Envelope, aggregate
from services.gateway.features import FEATURES


def watched(envelopes: Iterable[Envelope]) -> set[str]:
    """What the projector wakes once these events are stored (Projector.watching):
    the long polls' aggregates (`polled`) and the web UI's pages (`shown`)."""
    events = list(envelopes)
    return polled(events) | shown(events)


def polled(envelopes: Iterable[Envelope]) -> set[str]:
    """The aggregates whose watched state these events change: an allocation's
    stop request or its end, a trial's searcher length or stop. The projector
    wakes the WatchAllocation calls waiting on them once they are stored."""
    found: set[str] = set()
    for envelope in envelopes:
        field_name = envelope.WhichOneof("payload")
        kind = _POLLED_EVENTS.get(field_name or "")
        if kind is not None:
            payload = getattr(envelope, field_name or "")
            found.add(aggregate(kind, payload.allocation_id if kind == "allocation" else payload.trial_id))
    return found


# Event type -> the kind of aggregate whose long polls it wakes.
_POLLED_EVENTS = {name: kind for feature in FEATURES for name, kind in feature.polled_events.items()}

# What the web UI's pages show, as the names a live page waits on (the HTTP
# API's streams): the experiments list, one experiment's page (its row, its
# trials' rows, metrics and checkpoints), one trial's page, the cluster page.
SHOWN_EXPERIMENTS = "shown/experiments"


SHOWN_CLUSTER = "shown/cluster"


def shown_experiment(experiment_id: int) -> str:
    return f"shown/experiment/{experiment_id}"


def shown_trial(trial_id: int) -> str:
    return f"shown/trial/{trial_id}"


def shown(envelopes: Iterable[Envelope]) -> set[str]:
    """The pages these events change: an event naming an experiment or a
    trial changes their pages (an allocation's, its trial's: its id is
    `<trial id>.<run>`); those that change an experiment's row in the list,
    or the agents, slots and job queue, change those pages too."""
    found: set[str] = set()
    for envelope in envelopes:
        field_name = envelope.WhichOneof("payload")
        if field_name is None:
            continue
        payload = getattr(envelope, field_name)
        names_experiment, names_trial, names_allocation, pages = _page_rule(field_name, payload.DESCRIPTOR)
        if field_name == "allocation_requested":
            experiment_id, trial_id = payload.trial.experiment_id, payload.trial.trial_id
        else:
            experiment_id = payload.experiment_id if names_experiment else 0
            trial_id = payload.trial_id if names_trial else 0
            if names_allocation and not trial_id:
                task_id = payload.allocation_id.partition(".")[0]
                trial_id = int(task_id) if task_id.isdigit() else 0
        if experiment_id:
            found.add(shown_experiment(experiment_id))
        if trial_id:
            found.add(shown_trial(trial_id))
        found.update(pages)
    return found


@functools.cache
def _page_rule(field_name: str, descriptor: Any) -> tuple[bool, bool, bool, tuple[str, ...]]:
    """For an event type: whether it names an experiment, a trial, an
    allocation, and the pages it changes whatever it names."""
    fields = descriptor.fields_by_name
    pages: tuple[str, ...] = (SHOWN_EXPERIMENTS,) if field_name in _LISTED_EVENTS else ()
    if field_name in _CLUSTER_EVENTS or field_name.startswith(("agent_", "allocation_")):
        pages += (SHOWN_CLUSTER,)
    return "experiment_id" in fields, "trial_id" in fields, "allocation_id" in fields, pages


# The events that change what the experiments list shows of an experiment (its
# row, its number of trials, its progress, its best metric).
_LISTED_EVENTS = frozenset().union(*(feature.listed_events for feature in FEATURES))
# Besides agent and allocation events: what changes the job queue.
_CLUSTER_EVENTS = frozenset().union(*(feature.cluster_events for feature in FEATURES))
