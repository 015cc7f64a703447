"""The logs' functions (det trial logs), which the gRPC servicer and the HTTP
routes call."""

from collections.abc import AsyncIterator

from determined.proto import api_pb2
from services.gateway.features.logs import stream
from services.gateway.features.parts import FeatureService


class Logs(FeatureService):
    async def trial_logs(self, request: api_pb2.TrialLogsRequest) -> AsyncIterator[api_pb2.TrialLogsResponse]:
        await self._found(self.queries.trials.trial_status, request.trial_id, "trial")
        rank = request.rank if request.HasField("rank") else None
        async for response in stream.trial_logs(
            self.store, request.trial_id, request.follow, self.queries.trials.trial_status, rank=rank
        ):
            yield response
