"""The trials' functions (det trial describe|kill, metrics, charts), which the
gRPC servicer and the HTTP routes call."""

from collections.abc import AsyncIterator

from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.gateway.downsample import Point
from services.gateway.features.commands import Unchanged
from services.gateway.features.parts import FeatureService
from services.gateway.features.trials import commands
from services.gateway.features.trials.queries import MetricKey, TrialStatus

# Metric points per GetTrialMetrics response.
METRICS_PAGE = 1000


class Trials(FeatureService):
    async def get_trial(self, request: api_pb2.GetTrialRequest) -> api_pb2.GetTrialResponse:
        trial = await self._found(self.queries.trials.trial, request.trial_id, "trial")
        return api_pb2.GetTrialResponse(
            trial=trial,
            checkpoints=await self.queries.checkpoints.of_trial(request.trial_id),
            metrics=await self.queries.trials.recent_metrics(request.trial_id),
            runs=await self.queries.trials.runs(request.trial_id),
        )

    async def trial_ids(self, experiment_id: int) -> list[int]:
        """The ids of the experiment's trials, in order."""
        return await self.queries.trials.trial_ids(experiment_id)

    async def trial_status(self, trial_id: int) -> TrialStatus:
        """The trial's status; NotFoundError when there is no such trial."""
        return await self._found(self.queries.trials.trial_status, trial_id, "trial")

    async def get_trial_metrics(
        self, request: api_pb2.GetTrialMetricsRequest
    ) -> AsyncIterator[api_pb2.GetTrialMetricsResponse]:
        """Every shown point (superseded ones are not) of the trial's metrics,
        of one group or all, by group then step, METRICS_PAGE points per
        response, each page read on its own (no transaction held open while
        a slow reader drains the stream)."""
        await self._found(self.queries.trials.trial_status, request.trial_id, "trial")
        after: MetricKey | None = None
        while True:
            page = await self.queries.trials.metric_points(
                request.trial_id, request.group, after, METRICS_PAGE
            )
            if page:
                yield api_pb2.GetTrialMetricsResponse(points=[point for _, point in page])
            if len(page) < METRICS_PAGE:
                return
            after = page[-1][0]

    async def kill_trial(self, request: api_pb2.KillTrialRequest) -> api_pb2.KillTrialResponse:
        trial_id = request.trial_id

        async def decide(version: int) -> Append | Unchanged:
            status = await self._found(self.queries.trials.trial_status, trial_id, "trial")
            return commands.trial_kill_requested(trial_id, status, version)

        unchanged = await self._decide_and_append(aggregate("trial", trial_id), decide)
        return api_pb2.KillTrialResponse(unchanged_reason=unchanged)

    async def metric_chart(
        self, trial_id: int, group: str, metric: str, ranges: int
    ) -> tuple[int, list[Point]]:
        """A chart's preselection of one metric of the trial (TrialQueries.metric_chart);
        NotFoundError for an unknown trial."""
        await self.trial_status(trial_id)
        return await self.queries.trials.metric_chart(trial_id, group, metric, ranges)
