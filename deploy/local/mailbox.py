"""How `det deploy local` asks the running supervisor for something: one
JSON file per request in `<data dir>/run/requests/`, written atomically
(`.tmp` renamed to `.json`), e.g. `{"action": "restart", "parts": ["postgres"]}`.
The poster wakes the supervisor with SIGCHLD (ignored by default, so harmless to
whatever else has that pid now); it looks there on its next tick (within a second
without the signal), acts, and deletes the file; the caller follows the outcome in status.json. Files, not a Unix
socket: a socket's path is limited to 108 bytes and data folders may be
deeper than that.

    restart  stop the part (its stop signal) and start it again at once: not counted
             as a crash, whatever its state was
    stop     stop it and keep it stopped (state "stopped") until `start`
    start    start it now: skips what is left of a backoff, ends a `stop`
    add-agent     a new agent part, {"action": "add-agent", "parts": [part], "agent":
                  {"part", "agent_id", "cpu_slots", "pool"}}: recorded in cluster.json, then started
    remove-agent  stop the agent part and forget it (det deploy local agent-down)
"""

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, cast

from deploy.local.cluster import AgentSpec
from deploy.local.decisions import PARTS, Action

RequestAction = Action | Literal["add-agent", "remove-agent"]
ACTIONS: tuple[RequestAction, ...] = ("restart", "stop", "start", "add-agent", "remove-agent")


class BadRequestError(ValueError):
    """Names the request file and what is wrong with it."""


@dataclass(frozen=True)
class Request:
    action: RequestAction
    parts: tuple[str, ...]
    # add-agent: the agent to add (its part is parts[0]).
    agent: AgentSpec | None = None


def requests_dir(data_dir: Path) -> Path:
    return data_dir / "run" / "requests"


def post(data_dir: Path, request: Request, wake: int = 0) -> None:
    """Leaves the request for the supervisor, and wakes it where `wake` is its pid."""
    folder = requests_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    partial = folder / f"{name}.tmp"
    document: dict[str, object] = {"action": request.action, "parts": list(request.parts)}
    if request.agent is not None:
        document["agent"] = asdict(request.agent)
    partial.write_text(json.dumps(document))
    partial.rename(folder / f"{name}.json")
    if wake:
        with contextlib.suppress(OSError):
            os.kill(wake, signal.SIGCHLD)


def parse(text: str, known: Collection[str] = PARTS) -> Request:
    """BadRequestError unless it is {"action": one of ACTIONS, "parts": [known
    part names]} (add-agent: one new part name, and its agent)."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise BadRequestError(f"not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("action") not in ACTIONS:
        raise BadRequestError(f"the action must be one of {', '.join(ACTIONS)}")
    action = cast(RequestAction, document["action"])
    parts = document.get("parts")
    if action == "add-agent":
        return Request(
            action, tuple(parts) if isinstance(parts, list) else (), _agent(document.get("agent"), known)
        )
    if not isinstance(parts, list) or not parts or any(part not in known for part in parts):
        raise BadRequestError(f"parts must be a list of: {', '.join(known)}")
    return Request(action, tuple(parts))


def _agent(value: object, known: Collection[str]) -> AgentSpec:
    try:
        agent = AgentSpec(**value) if isinstance(value, dict) else None
    except TypeError:
        agent = None
    if agent is None or not isinstance(agent.cpu_slots, int) or agent.cpu_slots < 1:
        raise BadRequestError('"agent" must be {"part", "agent_id", "cpu_slots" (1 or more), "pool"}')
    if agent.part in known:
        raise BadRequestError(f"there is a part called {agent.part} already")
    return agent


def take(data_dir: Path, known: Collection[str] = PARTS) -> list[Request | BadRequestError]:
    """The waiting requests, oldest first, each removed as it is read."""
    folder = requests_dir(data_dir)
    if not folder.exists():
        return []
    taken: list[Request | BadRequestError] = []
    for path in sorted(folder.glob("*.json"), key=_age):
        try:
            taken.append(parse(path.read_text(), known))
        except BadRequestError as error:
            taken.append(BadRequestError(f"{path.name}: {error}"))
        except FileNotFoundError:
            continue
        path.unlink(missing_ok=True)
    return taken


def _age(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0
