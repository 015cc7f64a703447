"""Detached runs (determined.experimental.core_v2): a script outside the cluster, logged in
as a user, is its unmanaged experiment's one trial.

core_v2.init creates the experiment (CreateExperiment with `unmanaged`: the searcher creates
its one trial and nothing is scheduled), then StartUnmanagedTrial waits for that trial and
says how often to send a heartbeat. The script reports its metrics and checkpoints with the
calls trial processes make (features/trials/reports.py), authorized here by its user's
session instead of an allocation token: only for a trial of a detached run, only its
experiment's owner, only while the trial has not ended. ReportUnmanagedTrial is its
heartbeat (UnmanagedTrialHeartbeat, carrying the cluster's timeout) or says how it ended
(UnmanagedTrialExited); the searcher (services/searcher/unmanaged.py) decides the trial's
end, also when the heartbeats stop.
"""

import asyncio
import contextlib
import time
from dataclasses import dataclass

from determined.common import states
from determined.proto import api_pb2, events_pb2
from services.common.envelope import Append, aggregate
from services.common.reasons import capped
from services.gateway.auth import UserPrincipal, require_user
from services.gateway.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from services.gateway.features.parts import FeatureService
from services.gateway.features.trials.queries import AllocationView
from services.gateway.read_models import SCHEMA as S
from services.gateway.watched import shown_experiment

# How long StartUnmanagedTrial waits for the searcher to create the trial.
START_WAIT_S = 30.0
# The script sends this many heartbeats per timeout, at most one a minute (Determined's).
HEARTBEATS_PER_TIMEOUT = 5
MAX_HEARTBEAT_S = 60.0
MAX_REPORTER_ID_CHARS = 100
# The ends a script may say it reached, by name (ReportUnmanagedTrialRequest.end_state).
SAID_ENDS = {
    end.value: events_pb2.TrialState.ValueType(states.proto_value(end))
    for end in sorted(states.DETACHED_TRIAL_ENDS)
}


@dataclass(frozen=True)
class DetachedTrial:
    """What deciding who may report for a trial needs."""

    trial_id: int
    experiment_id: int
    state: str
    owner: str
    unmanaged: bool


def reporting_refusal(trial: DetachedTrial, username: str) -> Exception | None:
    """Why `username`'s session may not report for the trial (None: it may)."""
    if not trial.unmanaged:
        return PermissionDeniedError(
            f"trial {trial.trial_id} runs on the cluster: only a trial process of it (its allocation"
            " token) may report for it; a user's login reports only for a detached run (core_v2)"
        )
    if trial.owner != username:
        return PermissionDeniedError(
            f"trial {trial.trial_id} is {trial.owner}'s detached run: only {trial.owner} reports for it,"
            f" not {username}"
        )
    if states.is_terminal(trial.state):
        return FailedPreconditionError(
            f"trial {trial.trial_id} has ended ({trial.state}); reports for it are refused"
        )
    return None


def heartbeat_s(timeout_s: float) -> float:
    """How often a script says it is alive, given the cluster's timeout."""
    return min(timeout_s / HEARTBEATS_PER_TIMEOUT, MAX_HEARTBEAT_S)


def reported(request: api_pb2.ReportUnmanagedTrialRequest, experiment_id: int, timeout_s: float) -> Append:
    """The heartbeat (no end_state) or the end the script said; InvalidArgumentError for
    another end or a request that cannot name its heartbeat."""
    trial_id = request.trial_id
    if request.end_state:
        state = SAID_ENDS.get(request.end_state)
        if state is None:
            raise InvalidArgumentError(
                f"end_state {request.end_state[:40]!r} is none of {', '.join(SAID_ENDS)} (or empty: a heartbeat)"
            )
        ended = events_pb2.UnmanagedTrialExited(
            trial_id=trial_id, experiment_id=experiment_id, state=state, reason=capped(request.reason)
        )
        return Append(aggregate("trial", trial_id), ended, f"detached-exited-{trial_id}")
    if request.seq < 1 or not 0 < len(request.reporter_id) <= MAX_REPORTER_ID_CHARS:
        raise InvalidArgumentError(
            f"a heartbeat needs a reporter_id (at most {MAX_REPORTER_ID_CHARS} characters) and a seq from 1"
        )
    alive = events_pb2.UnmanagedTrialHeartbeat(
        trial_id=trial_id, experiment_id=experiment_id, timeout_s=timeout_s
    )
    msg_id = f"detached-alive-{trial_id}-{request.reporter_id}-{request.seq}"
    return Append(aggregate("trial", trial_id), alive, msg_id)


def allocation_view(trial: DetachedTrial) -> AllocationView:
    """What the reports' handlers read about the caller's run: a detached trial has no
    allocation, never a stop (the script runs as long as it likes)."""
    return AllocationView(
        allocation_id="",
        trial_id=trial.trial_id,
        experiment_id=trial.experiment_id,
        current_allocation_id=None,
        exited=False,
        canceled=False,
        stop_requested=False,
        stop_reason=None,
        searcher_length=0,
        searcher_stop=None,
    )


_DETACHED_TRIAL = f"""
SELECT t.id, t.experiment_id, t.state, coalesce(e.owner, ''), coalesce(e.unmanaged, false)
FROM {S}.trials t LEFT JOIN {S}.experiments e ON e.id = t.experiment_id
WHERE t.id = $1
"""


class DetachedRuns(FeatureService):
    async def start_unmanaged_trial(
        self, request: api_pb2.StartUnmanagedTrialRequest
    ) -> api_pb2.StartUnmanagedTrialResponse:
        """The experiment's one trial, once the searcher created it (at most START_WAIT_S)."""
        user = require_user()
        experiment_id = request.experiment_id
        with self.projector.watching([shown_experiment(experiment_id)]) as changed:
            experiment = await self._after_catch_up(self.queries.experiments.experiment, experiment_id)
            if experiment is None:
                raise NotFoundError(f"experiment {experiment_id} not found")
            deadline = time.monotonic() + START_WAIT_S
            while not (trials := await self.queries.trials.trials(experiment_id)):
                if not experiment.unmanaged:
                    break  # refused below, without waiting
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FailedPreconditionError(
                        f"experiment {experiment_id} has no trial after {START_WAIT_S:g} s: is the searcher up?"
                    )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await changed.wait()
                changed.clear()
        if not experiment.unmanaged:
            raise FailedPreconditionError(
                f"experiment {experiment_id} runs on the cluster, not as a detached run (core_v2)"
            )
        trial = trials[0]
        await self.reporting(user, trial.id)
        timeout_s = self.settings.unmanaged_timeout_s
        return api_pb2.StartUnmanagedTrialResponse(
            trial_id=trial.id,
            hparams_json=trial.hparams_json,
            trial_seed=trial.trial_seed,
            config_json=experiment.config_json,
            heartbeat_s=heartbeat_s(timeout_s),
            heartbeat_timeout_s=timeout_s,
        )

    async def report_unmanaged_trial(
        self, request: api_pb2.ReportUnmanagedTrialRequest
    ) -> api_pb2.ReportUnmanagedTrialResponse:
        user = require_user()
        view = await self.reporting(user, request.trial_id)
        append = reported(request, view.experiment_id, self.settings.unmanaged_timeout_s)
        await self.store.append(append, actor=user.actor)
        return api_pb2.ReportUnmanagedTrialResponse()

    async def reporting(self, user: UserPrincipal, trial_id: int) -> AllocationView:
        """The trial's run, when `user` may report for it; else the refusal (reporting_refusal)."""
        trial = await self._after_catch_up(self._detached_trial, trial_id)
        if trial is None:
            raise NotFoundError(f"trial {trial_id} not found")
        refusal = reporting_refusal(trial, user.username)
        if refusal is not None:
            raise refusal
        return allocation_view(trial)

    async def _detached_trial(self, trial_id: int) -> DetachedTrial | None:
        row = await self.queries.pool.fetchrow(_DETACHED_TRIAL, trial_id)
        return None if row is None else DetachedTrial(*row)
