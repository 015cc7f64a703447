"""Reading a request's query parameters and body, as Determined's REST API
names and spells them (`states=STATE_ACTIVE`, `sortBy=SORT_BY_START_TIME`,
`orderBy=ORDER_BY_DESC`); a bad value is INVALID_ARGUMENT (400) naming it.
A list parameter may be repeated (`states=A&states=B`) or comma separated.
"""

import datetime
import json
from typing import Any

from starlette.requests import Request

from determined.proto import api_pb2
from services.gateway.errors import InvalidArgumentError
from services.gateway.features.experiments.details import MAX_LISTING_LIMIT
from services.gateway.features.experiments.queries import EXPERIMENT_SORTS, SORT_ALIASES

# Unix nanoseconds fit an int64 in at most this many digits (today's have 19).
MAX_TIME_DIGITS = 19
# The most an int32 field of a request (an offset) holds.
MAX_INT32 = 2**31 - 1


def number(request: Request, name: str, default: int, *, least: int, most: int | None = None) -> int:
    value = optional_number(request, name)
    if value is None:
        return default
    if value < least or (most is not None and value > most):
        bounds = f"at least {least}" if most is None else f"from {least} to {most}"
        raise InvalidArgumentError(f"{name} must be {bounds}, not {value}")
    return value


def optional_number(request: Request, name: str) -> int | None:
    text = request.query_params.get(name, "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError as error:
        raise InvalidArgumentError(f"{name} must be a whole number, not {text!r}") from error


def flag(request: Request, name: str) -> bool:
    text = request.query_params.get(name, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise InvalidArgumentError(f"{name} must be true or false, not {text!r}")
    return text in ("true", "1")


def listed(request: Request, name: str) -> tuple[str, ...]:
    return tuple(
        item.strip()
        for value in request.query_params.getlist(name)
        for item in value.split(",")
        if item.strip()
    )


def order_by(request: Request) -> str:
    """ "asc", "desc" or "" (the listing's natural order)."""
    text = request.query_params.get("orderBy", "").upper().removeprefix("ORDER_BY_")
    if text not in ("", "UNSPECIFIED", "ASC", "DESC"):
        raise InvalidArgumentError(f"orderBy must be ORDER_BY_ASC or ORDER_BY_DESC, not {text!r}")
    return "" if text == "UNSPECIFIED" else text.lower()


def experiments_request(request: Request) -> api_pb2.GetExperimentsRequest:
    """GET /api/v1/experiments's query as GetExperimentsRequest (the feature checks each
    filter): states (STATE_ACTIVE or ACTIVE), users, name (a part of it), labels (every one),
    archived (absent: both), sortBy (SORT_BY_NAME or name), orderBy, offset, limit (0: all)."""
    sort_by = request.query_params.get("sortBy", "").lower().removeprefix("sort_by_")
    sort_by = SORT_ALIASES.get(sort_by, sort_by) if sort_by not in ("", "unspecified") else "id"
    if sort_by not in EXPERIMENT_SORTS:
        choices = ", ".join(f"SORT_BY_{name.upper()}" for name in EXPERIMENT_SORTS)
        raise InvalidArgumentError(f"sortBy must be one of {choices}")
    asked = api_pb2.GetExperimentsRequest(
        limit=number(request, "limit", 0, least=0, most=MAX_LISTING_LIMIT),
        offset=number(request, "offset", 0, least=0, most=MAX_INT32),
        name=request.query_params.get("name", ""),
        labels=listed(request, "labels"),
        states=listed(request, "states"),
        users=listed(request, "users"),
        sort_by=sort_by,
        descending=order_by(request) == "desc",
    )
    if "archived" in request.query_params:
        asked.archived = flag(request, "archived")
    return asked


def body_flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be true or false, not {value!r}")
    return value


async def json_body(request: Request, max_bytes: int | None = None) -> dict[str, Any]:
    """The body's JSON object; with `max_bytes`, refused once it grows past them."""
    raw = await request.body() if max_bytes is None else await _bounded_body(request, max_bytes)
    try:
        body = json.loads(raw or b"{}")
    except ValueError as error:
        raise InvalidArgumentError(f"the request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise InvalidArgumentError("the request body must be a JSON object")
    return body


async def _bounded_body(request: Request, max_bytes: int) -> bytes:
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > max_bytes:
            raise InvalidArgumentError(
                f"the request body is over {max_bytes} bytes, more than this request takes"
            )
    return bytes(received)


def str_list(body: dict[str, Any], name: str) -> list[str]:
    """A body's list of strings ([] when absent)."""
    value = body.get(name) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidArgumentError(f"{name} must be a list of strings")
    return value


def id_list(body: dict[str, Any], name: str) -> list[int]:
    """A body's list of ids: whole numbers from 1 ([] when absent)."""
    value = body.get(name) or []
    if not isinstance(value, list) or not all(type(item) is int and 0 < item < 2**63 for item in value):
        raise InvalidArgumentError(f"{name} must be a list of ids (whole numbers from 1)")
    return value


def body_str(body: dict[str, Any], name: str) -> str:
    """A body's string ("" when absent)."""
    value = body.get(name) or ""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string")
    return value


def event_filter(request: Request) -> api_pb2.EventFilter:
    """GET /api/v1/events's filter: experimentId, trialId, allocationId, taskId,
    user, type (repeated or comma separated), since and until (Unix
    nanoseconds or ISO 8601), fromSeq."""
    return api_pb2.EventFilter(
        experiment_id=number(request, "experimentId", 0, least=0),
        trial_id=number(request, "trialId", 0, least=0),
        allocation_id=request.query_params.get("allocationId", ""),
        task_id=request.query_params.get("taskId", ""),
        user=request.query_params.get("user", ""),
        types=listed(request, "type"),
        since_ns=time_ns(request, "since"),
        until_ns=time_ns(request, "until"),
        from_sequence=number(request, "fromSeq", 0, least=0),
    )


def time_ns(request: Request, name: str) -> int:
    """A time as Unix nanoseconds or ISO 8601 (UTC unless it names its zone); 0 when absent."""
    text = request.query_params.get(name, "")
    if not text or text.isdigit():
        if len(text) > MAX_TIME_DIGITS:
            raise InvalidArgumentError(f"{name} must be Unix nanoseconds or an ISO 8601 time, not {text!r}")
        return int(text or 0)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError as error:
        raise InvalidArgumentError(
            f"{name} must be Unix nanoseconds or an ISO 8601 time, not {text!r}"
        ) from error
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 10**9)
