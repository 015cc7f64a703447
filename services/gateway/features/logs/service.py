"""The logs' functions (det trial logs, det master logs), which the gRPC
servicer and the HTTP routes call."""

from collections.abc import AsyncIterator

from determined.proto import api_pb2
from services.gateway.auth import require_admin
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.logs import filters, master, stream
from services.gateway.features.parts import FeatureService, Parts


class Logs(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._master_logs = master.installed()  # from the gateway's start on

    async def master_logs(
        self, request: api_pb2.MasterLogsRequest
    ) -> AsyncIterator[api_pb2.MasterLogsResponse]:
        """The gateway's own recent log lines (det master logs); an admin's only."""
        require_admin("reading the master's logs")
        async for response in master.master_logs(self._master_logs, request):
            yield response

    async def trial_logs(self, request: api_pb2.TrialLogsRequest) -> AsyncIterator[api_pb2.TrialLogsResponse]:
        try:
            filters.line_filter(request)  # refused before the trial is looked up
        except ValueError as error:
            raise InvalidArgumentError(str(error)) from None
        await self._found(self.queries.trials.trial_status, request.trial_id, "trial")
        async for response in stream.trial_logs(self.store, request, self.queries.trials.trial_status):
            yield response
