"""Tokens signed with the cluster secret, which never goes into the event log.

Allocation tokens let a trial process report for its own trial and no other:
agents mint them, the gateway verifies them. Session tokens name a user's
session (a login): the gateway mints and verifies them; whether the session
is still good (not revoked, the user active, the password unchanged since)
is the gateway's directory's to say. The two kinds are signed over bodies of
different shapes, so that one never verifies as the other.
"""

import hashlib
import hmac
from dataclasses import dataclass

SESSION_PREFIX = "session"


class InvalidTokenError(Exception):
    pass


@dataclass(frozen=True)
class AllocationClaims:
    trial_id: int
    allocation_id: str


@dataclass(frozen=True)
class SessionClaims:
    user_id: int
    session_id: str
    expires_at_ns: int


def mint_allocation_token(secret: str, trial_id: int, allocation_id: str) -> str:
    body = f"{trial_id}:{allocation_id}"
    return f"{body}:{_sign(secret, body)}"


def verify_allocation_token(secret: str, token: str) -> AllocationClaims:
    body, _, signature = token.rpartition(":")
    trial_id, _, allocation_id = body.partition(":")
    if not body or not hmac.compare_digest(signature, _sign(secret, body)) or not trial_id.isdigit():
        raise InvalidTokenError("invalid allocation token")
    return AllocationClaims(int(trial_id), allocation_id)


def mint_session_token(secret: str, user_id: int, session_id: str, expires_at_ns: int) -> str:
    """`session:<user id>:<session id>:<expiry>:<signature>`; the session id must not hold ":"."""
    if ":" in session_id:
        raise ValueError("a session id cannot contain ':'")
    body = f"{SESSION_PREFIX}:{user_id}:{session_id}:{expires_at_ns}"
    return f"{body}:{_sign(secret, body)}"


def verify_session_token(secret: str, token: str) -> SessionClaims:
    """The claims of a token this cluster minted; InvalidTokenError otherwise.
    Expiry is the caller's to check (it has the clock)."""
    body, _, signature = token.rpartition(":")
    parts = body.split(":")
    if (
        len(parts) != 4
        or parts[0] != SESSION_PREFIX
        or not parts[1].isdigit()
        or not parts[3].isdigit()
        or not hmac.compare_digest(signature, _sign(secret, body))
    ):
        raise InvalidTokenError("invalid session token")
    return SessionClaims(int(parts[1]), parts[2], int(parts[3]))


def task_proxy_token(secret: str, task_id: str) -> str:
    """What a task's server (JupyterLab) asks of every request: the gateway's
    proxy sends it (`Authorization: token ...`), so that no other local user
    drives the task. A signature alone: it verifies as no other kind of token."""
    return _sign(secret, f"task-proxy:{task_id}")


def _sign(secret: str, body: str) -> str:
    return hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
