"""A warm start from another trial (`searcher.source_trial_id`): the trial's latest
checkpoint when the experiment is created, recorded in ExperimentCreated so that the
searcher hands it to each new trial as the checkpoint it starts from (and the checkpoint
service keeps it), as Determined resolves it at creation. A source trial that does not exist
or has no checkpoint is refused, as Determined refuses it."""

import json

from determined.common import states
from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.parts import Queries


def source_trial_id(config_json: str) -> int | None:
    """searcher.source_trial_id of a validated config, if it names one."""
    searcher = json.loads(config_json).get("searcher") or {}
    trial_id = searcher.get("source_trial_id")
    return int(trial_id) if trial_id is not None else None


def latest_usable(trial_id: int, checkpoints: list[api_pb2.Checkpoint]) -> str:
    """The uuid of the trial's latest checkpoint (most steps, then newest) that is not being
    deleted; InvalidArgumentError when it has none."""
    usable = [c for c in checkpoints if c.state in states.CHECKPOINT_DELETABLE_STATES]
    if not usable:
        raise InvalidArgumentError(
            f"searcher.source_trial_id: trial {trial_id} has no checkpoint to start from"
        )
    return max(usable, key=lambda c: (c.steps_completed, c.reported_at_ns)).uuid


async def source_trial_checkpoint(queries: Queries, config_json: str) -> str:
    """The checkpoint the experiment's trials start from when its searcher names a source
    trial ("" when it names none)."""
    trial_id = source_trial_id(config_json)
    if trial_id is None:
        return ""
    if await queries.trials.trial(trial_id) is None:
        raise InvalidArgumentError(f"searcher.source_trial_id: trial {trial_id} not found")
    return latest_usable(trial_id, await queries.checkpoints.of_trial(trial_id))
