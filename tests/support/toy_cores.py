"""A toy pure core for the Shell's integration tests: every experiment created gets
two trials, decided once."""

from determined.proto import events_pb2
from services.common.decider import PureCore
from services.common.envelope import Append, Envelope, payload_of


def two_trials_per_experiment(state: set[int], envelope: Envelope) -> set[int]:
    event = payload_of(envelope)
    if isinstance(event, events_pb2.ExperimentCreated):
        return state | {event.experiment_id}
    if isinstance(event, events_pb2.TrialCreated):
        return state - {event.experiment_id}
    return state


def decide(state: set[int]) -> list[Append]:
    return [
        Append(
            f"trial/{e * 10 + n}", events_pb2.TrialCreated(trial_id=e * 10 + n, experiment_id=e), f"t-{e}-{n}"
        )
        for e in sorted(state)
        for n in (1, 2)
    ]


def two_trials_core() -> PureCore[set[int]]:
    return PureCore(("experiment_created", "trial_created"), set, two_trials_per_experiment, decide)
