"""Reading events written in an older shape as today's events (upcasting).

The log keeps every event forever and a stored event is never rewritten, so a
shape that changed is translated where events are read: every pure core and
the projection fold `upcast(envelope)` instead of the envelope itself.

- Before allocations belonged to tasks, the scheduler's AllocationAssigned
  carried the trial's launch spec and one agent, and no AllocationRequested
  preceded it. Such an event reads as the request its trial would make today
  followed by an assignment with one placement.
"""

from determined.proto import events_pb2
from services.common.envelope import Envelope
from services.common.scheduling import DEFAULT_WEIGHT

TRIAL_TASK = "TRIAL"


def upcast(envelope: Envelope) -> list[Envelope]:
    """`envelope` as one or more events of today's shapes."""
    if envelope.WhichOneof("payload") == "allocation_assigned" and envelope.allocation_assigned.config_json:
        return _task_allocation(envelope)
    return [envelope]


def _task_allocation(envelope: Envelope) -> list[Envelope]:
    old = envelope.allocation_assigned
    task_id = str(old.trial_id)
    launch = events_pb2.TrialLaunch(
        experiment_id=old.experiment_id,
        trial_id=old.trial_id,
        trial_run_id=old.trial_run_id,
        config_json=old.config_json,
        hparams_json=old.hparams_json,
        context_hash=old.context_hash,
        trial_seed=old.trial_seed,
        latest_checkpoint=old.latest_checkpoint,
        steps_completed=old.steps_completed,
        owner=old.owner,
    )
    requested = Envelope()
    requested.CopyFrom(envelope)
    requested.event_id = f"{envelope.event_id}~requested"
    requested.allocation_requested.CopyFrom(
        events_pb2.AllocationRequested(
            allocation_id=old.allocation_id,
            task_id=task_id,
            task_type=TRIAL_TASK,
            slots=len(old.slot_ids),
            job_id=f"experiment/{old.experiment_id}",
            weight=DEFAULT_WEIGHT,
            owner=old.owner,
            trial=launch,
        )
    )
    assigned = Envelope()
    assigned.CopyFrom(envelope)
    assigned.allocation_assigned.CopyFrom(
        events_pb2.AllocationAssigned(
            allocation_id=old.allocation_id,
            task_id=task_id,
            placements=[events_pb2.Placement(agent_id=old.agent_id, slot_ids=old.slot_ids)],
        )
    )
    return [requested, assigned]
