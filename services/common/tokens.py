"""Allocation tokens: what lets a trial process report for its own trial and
no other. Agents mint them, the gateway verifies them; both hold the cluster
secret, which never goes into the event log."""

import hashlib
import hmac
from dataclasses import dataclass


class InvalidTokenError(Exception):
    pass


@dataclass(frozen=True)
class AllocationClaims:
    trial_id: int
    allocation_id: str


def mint_allocation_token(secret: str, trial_id: int, allocation_id: str) -> str:
    body = f"{trial_id}:{allocation_id}"
    return f"{body}:{_sign(secret, body)}"


def verify_allocation_token(secret: str, token: str) -> AllocationClaims:
    body, _, signature = token.rpartition(":")
    trial_id, _, allocation_id = body.partition(":")
    if not body or not hmac.compare_digest(signature, _sign(secret, body)) or not trial_id.isdigit():
        raise InvalidTokenError("invalid allocation token")
    return AllocationClaims(int(trial_id), allocation_id)


def _sign(secret: str, body: str) -> str:
    return hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()
