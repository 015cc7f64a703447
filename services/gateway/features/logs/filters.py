"""Which of a trial's log lines a TrialLogsRequest keeps (pure).

A line's level is the one it starts with, as Determined's log shipper reads
it ("INFO: ...", "WARNING:..."; python logging's default format), after the
rank prefix the agent already removed; a line without one has no level and
is left out when levels are asked for. A line's source is "agent" for the
notes the agent writes itself (they start "determined agent: "), else
"container" (the trial's own output); no line comes from the master. A
line's container is its allocation (one process or container per agent).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from determined.proto import api_pb2, events_pb2

_LEVEL = re.compile(r" ?(TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL):")
AGENT_NOTE = "determined agent: "
# Each filter's values and the search text: at most so many, checked before a read starts.
MAX_FILTER_VALUES = 100
MAX_SEARCH_TEXT = 1000


def level_of(text: str) -> str:
    """ "INFO", "ERROR", ... when the line starts with one; "" otherwise."""
    found = _LEVEL.match(text)
    return found.group(1) if found else ""


def source_of(line: events_pb2.LogLine) -> str:
    return "agent" if line.log.startswith(AGENT_NOTE) else "container"


@dataclass(frozen=True)
class LineFilter:
    """What a request keeps; an empty set keeps every value."""

    agent_ids: frozenset[str] = frozenset()
    container_ids: frozenset[str] = frozenset()
    ranks: frozenset[int] = frozenset()
    levels: frozenset[str] = frozenset()
    stdtypes: frozenset[str] = frozenset()
    sources: frozenset[str] = frozenset()
    before_ns: int = 0
    after_ns: int = 0
    search_text: str = ""

    @property
    def keeps_all_lines(self) -> bool:
        """Whether every line of a batch it keeps is kept (only batch-wide filters)."""
        return not (
            self.ranks
            or self.levels
            or self.stdtypes
            or self.sources
            or self.before_ns
            or self.after_ns
            or self.search_text
        )

    def keeps_batch(self, batch: events_pb2.LogBatch | api_pb2.TrialLogsResponse) -> bool:
        return (not self.agent_ids or batch.agent_id in self.agent_ids) and (
            not self.container_ids or batch.allocation_id in self.container_ids
        )

    def keeps(self, line: events_pb2.LogLine) -> bool:
        return (
            (not self.ranks or (line.HasField("rank") and line.rank in self.ranks))
            and (not self.stdtypes or line.stdtype in self.stdtypes)
            and (not self.before_ns or line.timestamp_ns < self.before_ns)
            and (not self.after_ns or line.timestamp_ns > self.after_ns)
            and (not self.search_text or self.search_text in line.log)
            and (not self.levels or level_of(line.log) in self.levels)
            and (not self.sources or source_of(line) in self.sources)
        )


def line_filter(request: api_pb2.TrialLogsRequest) -> LineFilter:
    """The request's filter (`rank` and `rank_ids` together); ValueError names
    a filter with too many values or a level, stdtype or source that is not one."""
    _check_sizes(request)
    ranks = set(request.rank_ids) | ({request.rank} if request.HasField("rank") else set())
    return LineFilter(
        agent_ids=frozenset(request.agent_ids),
        container_ids=frozenset(request.container_ids),
        ranks=frozenset(ranks),
        levels=_known("level", request.levels, {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}),
        stdtypes=_known("stdtype", request.stdtypes, {"stdout", "stderr"}),
        sources=_known("source", request.sources, {"master", "agent", "container"}),
        before_ns=request.timestamp_before_ns,
        after_ns=request.timestamp_after_ns,
        search_text=request.search_text,
    )


def _check_sizes(request: api_pb2.TrialLogsRequest) -> None:
    for name in ("agent_ids", "container_ids", "rank_ids", "levels", "stdtypes", "sources"):
        if len(getattr(request, name)) > MAX_FILTER_VALUES:
            raise ValueError(f"{name}: at most {MAX_FILTER_VALUES} values")
    if len(request.search_text) > MAX_SEARCH_TEXT:
        raise ValueError(f"search_text: at most {MAX_SEARCH_TEXT} characters")
    if request.limit < 0:
        raise ValueError("limit: 0 (no limit) or more")


def _known(name: str, values: Iterable[str], known: set[str]) -> frozenset[str]:
    """The values, each as Determined's REST or our CLI names it ("LOG_LEVEL_INFO" or "INFO")."""
    chosen = frozenset(value.removeprefix("LOG_LEVEL_") for value in values)
    if unknown := chosen - known:
        raise ValueError(f"{name} {sorted(unknown)[0]!r} is not one of {', '.join(sorted(known))}")
    return chosen


def kept(response: api_pb2.TrialLogsResponse, chosen: LineFilter) -> api_pb2.TrialLogsResponse | None:
    """The response with only the lines `chosen` keeps; None when none is left."""
    if not chosen.keeps_batch(response):
        return None
    if chosen.keeps_all_lines:
        return response
    lines = [line for line in response.lines if chosen.keeps(line)]
    if not lines:
        return None
    return with_lines(response, lines)


def with_lines(
    response: api_pb2.TrialLogsResponse, lines: Sequence[events_pb2.LogLine]
) -> api_pb2.TrialLogsResponse:
    return api_pb2.TrialLogsResponse(
        trial_id=response.trial_id,
        allocation_id=response.allocation_id,
        agent_id=response.agent_id,
        lines=lines,
    )


def last_lines(responses: Sequence[api_pb2.TrialLogsResponse], count: int) -> list[api_pb2.TrialLogsResponse]:
    """The last `count` lines of the responses, in order, as responses."""
    chosen: list[api_pb2.TrialLogsResponse] = []
    for response in reversed(responses):
        if count <= 0:
            break
        lines = response.lines[-count:]
        chosen.append(response if len(lines) == len(response.lines) else with_lines(response, lines))
        count -= len(lines)
    return chosen[::-1]


def line_count(responses: Iterable[api_pb2.TrialLogsResponse]) -> int:
    return sum(len(response.lines) for response in responses)
