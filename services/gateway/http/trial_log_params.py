"""Determined's TrialLogs parameters (GET /api/v1/trials/{id}/logs) as a
TrialLogsRequest: follow, limit, orderBy, agentIds, containerIds, rankIds,
levels (LOG_LEVEL_INFO, ...), stdtypes, sources, timestampBefore/After
(RFC 3339), searchText. A list may be repeated or comma separated.

Determined's client asks for `det trial logs --tail N` as the first N lines
newest first (limit=N, orderBy=ORDER_BY_DESC) and turns them around itself:
that is the request's `tail` here, its lines sent newest first (`newest_first`).
"""

from collections.abc import AsyncIterator

from starlette.requests import Request

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.logs import filters
from services.gateway.http.params import flag, listed, number, order_by, time_ns

# The most lines a newest-first request may ask for: they are held to be turned around.
MAX_NEWEST_FIRST_LINES = 100_000


def trial_logs_request(request: Request, trial_id: int) -> tuple[api_pb2.TrialLogsRequest, bool]:
    """The request, and whether its lines go newest first; INVALID_ARGUMENT
    names a parameter that is not one (before anything is read)."""
    if flag(request, "enableRegex"):
        raise InvalidArgumentError("enableRegex is not supported: searchText is matched as plain text")
    newest_first = order_by(request) == "desc"
    limit = number(request, "limit", 0, least=0, most=2**31 - 1)
    follow = flag(request, "follow")
    if newest_first and (follow or not 0 < limit <= MAX_NEWEST_FIRST_LINES):
        raise InvalidArgumentError(
            f"orderBy=ORDER_BY_DESC (the last lines, newest first) takes a limit from 1 to "
            f"{MAX_NEWEST_FIRST_LINES} and no follow"
        )
    logs_request = api_pb2.TrialLogsRequest(
        trial_id=trial_id,
        follow=follow,
        limit=limit,
        tail=newest_first,
        agent_ids=listed(request, "agentIds"),
        container_ids=listed(request, "containerIds"),
        rank_ids=_ranks(request),
        levels=listed(request, "levels"),
        stdtypes=listed(request, "stdtypes"),
        sources=listed(request, "sources"),
        timestamp_before_ns=time_ns(request, "timestampBefore"),
        timestamp_after_ns=time_ns(request, "timestampAfter"),
        search_text=request.query_params.get("searchText", ""),
    )
    try:
        filters.line_filter(logs_request)
    except ValueError as error:
        raise InvalidArgumentError(str(error)) from None
    return logs_request, newest_first


def _ranks(request: Request) -> list[int]:
    values = listed(request, "rankIds")
    if len(values) > filters.MAX_FILTER_VALUES:
        raise InvalidArgumentError(f"rankIds: at most {filters.MAX_FILTER_VALUES} values")
    try:
        ranks = [int(value) for value in values]
    except ValueError:
        raise InvalidArgumentError(f"rankIds must be whole numbers, not {', '.join(values)}") from None
    if any(not 0 <= rank < 2**31 for rank in ranks):
        raise InvalidArgumentError("rankIds must be from 0 to 2^31-1")
    return ranks


async def newest_first(
    responses: AsyncIterator[api_pb2.TrialLogsResponse],
) -> AsyncIterator[api_pb2.TrialLogsResponse]:
    """The responses' lines turned around (the request's limit bounds what is held)."""
    held = [response async for response in responses]
    for response in reversed(held):
        yield filters.with_lines(response, response.lines[::-1])
