"""How `det deploy local` asks the running supervisor for something: one
JSON file per request in `<data dir>/run/requests/`, written atomically
(`.tmp` renamed to `.json`), e.g. `{"action": "restart", "parts": ["postgres"]}`.
The supervisor looks there on every tick (every 50 ms), acts, and deletes
the file; the caller follows the outcome in status.json. Files, not a Unix
socket: a socket's path is limited to 108 bytes and data folders may be
deeper than that.

    restart  stop the part (its stop signal) and start it again at once: not counted
             as a crash, whatever its state was
    stop     stop it and keep it stopped (state "stopped") until `start`
    start    start it now: skips what is left of a backoff, ends a `stop`
"""

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from deploy.local.decisions import PARTS, Action

ACTIONS: tuple[Action, ...] = ("restart", "stop", "start")


class BadRequestError(ValueError):
    """Names the request file and what is wrong with it."""


@dataclass(frozen=True)
class Request:
    action: Action
    parts: tuple[str, ...]


def requests_dir(data_dir: Path) -> Path:
    return data_dir / "run" / "requests"


def post(data_dir: Path, request: Request) -> None:
    folder = requests_dir(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    partial = folder / f"{name}.tmp"
    partial.write_text(json.dumps({"action": request.action, "parts": list(request.parts)}))
    partial.rename(folder / f"{name}.json")


def parse(text: str) -> Request:
    """BadRequestError unless it is {"action": one of ACTIONS, "parts": [known part names]}."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise BadRequestError(f"not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("action") not in ACTIONS:
        raise BadRequestError(f"the action must be one of {', '.join(ACTIONS)}")
    parts = document.get("parts")
    if not isinstance(parts, list) or not parts or any(part not in PARTS for part in parts):
        raise BadRequestError(f"parts must be a list of: {', '.join(PARTS)}")
    return Request(cast(Action, document["action"]), tuple(parts))


def take(data_dir: Path) -> list[Request | BadRequestError]:
    """The waiting requests, oldest first, each removed as it is read."""
    folder = requests_dir(data_dir)
    if not folder.exists():
        return []
    taken: list[Request | BadRequestError] = []
    for path in sorted(folder.glob("*.json"), key=_age):
        try:
            taken.append(parse(path.read_text()))
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
