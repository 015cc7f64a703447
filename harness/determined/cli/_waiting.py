"""When the CLI waits for the master, and for how long (pure decisions; the
Gateway in _client does the calls and the sleeping).

A call that fails because the master is restarting (nothing answers at its
address while the local cluster's record says it runs) or because a part the
gateway stands on is down (it answers UNAVAILABLE, naming nats-server or
PostgreSQL) is made again, with backoff, for up to $DET_CLI_WAIT_S seconds
(60 by default; 0: never wait), and one line on stderr says what is waited
for. Only calls that are safe to repeat are made again: reads, writes a
repeat leaves as one (an experiment created with a request id, a state set
again), and any call that never left this machine (the connection was
refused). Anything else fails at once, as before.
"""

import os
from collections.abc import Iterator, Mapping
from typing import Any, Literal

WAIT_ENV = "DET_CLI_WAIT_S"
DEFAULT_WAIT_S = 60.0
MAX_WAIT_S = 24 * 3600.0
FIRST_PAUSE_S = 0.25
MAX_PAUSE_S = 2.0

# Calls that change nothing, besides the Get* ones.
READS = frozenset(
    {"TrialLogs", "TaskLogs", "PreviewGc", "DownloadCheckpointFile", "ExplainEvents", "MasterLogs"}
)
# Writes whose repeat changes nothing more: a new session, a dropped one, a context stored
# by its hash, a state set again (the second answer says it is unchanged).
REPEATABLE_WRITES = frozenset(
    {
        "Login",
        "Logout",
        "UploadContext",
        "KillExperiment",
        "PauseExperiment",
        "ActivateExperiment",
        "CancelExperiment",
        "ArchiveExperiment",
        "UnarchiveExperiment",
        "PatchExperiment",
        "PutExperimentLabel",
        "DeleteExperimentLabel",
        "KillTrial",
        "KillTask",
        "EnableAgent",
        "DisableAgent",
        "EnableSlot",
        "DisableSlot",
        "PostCheckpointMetadata",
        "ReportCheckpointUse",
    }
)
# What grpcio says when it could not connect: the call was never sent.
NEVER_SENT = "failed to connect to all addresses"

Decision = Literal["wait", "fail", "give_up", "not_repeatable"]


def rpc_name(request: Any) -> str:
    """The RPC a request message is for: every request type is `<Rpc>Request`."""
    return str(type(request).DESCRIPTOR.name).removesuffix("Request")


def safe_to_repeat(rpc: str, request: Any = None) -> bool:
    """Whether making the call `rpc` again with the same request can do nothing twice."""
    if rpc.startswith("Get") or rpc in READS or rpc in REPEATABLE_WRITES:
        return True
    # The gateway stores one experiment (or task) per request id, however often it is sent.
    return rpc in ("CreateExperiment", "LaunchTask") and bool(getattr(request, "request_id", ""))


def never_sent(details: str) -> bool:
    """Whether a failed call's details say it never reached the master."""
    return NEVER_SENT in details


def part_down(address: str, details: str) -> str:
    """What an UNAVAILABLE answered by the gateway means, for the waiting line."""
    if "nats-server" in details:
        return "the cluster's event log (nats-server) is down"
    if "PostgreSQL" in details:
        return "the cluster's read models (PostgreSQL) are down"
    return f"the master at {address} answers that it is unavailable" + (f": {details}" if details else "")


def restarting(address: str, reason: str) -> str:
    """What a master that the local cluster's record says runs, but that does not answer, means."""
    return f"the master at {address} is not answering: {reason}"


def wait_budget(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait out one outage, from $DET_CLI_WAIT_S; ValueError naming the
    variable when it is not a number of seconds from 0 to a day."""
    raw = (os.environ if environ is None else environ).get(WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_WAIT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_S:
        raise ValueError(f"{WAIT_ENV} must be a number of seconds from 0 to {MAX_WAIT_S:.0f}, not {raw!r}")
    return seconds


def pauses() -> Iterator[float]:
    """The pauses between attempts: doubling from FIRST_PAUSE_S up to MAX_PAUSE_S."""
    pause = FIRST_PAUSE_S
    while True:
        yield pause
        pause = min(pause * 2, MAX_PAUSE_S)


def decide(outage: str, repeatable: bool, budget_s: float, waited_s: float, pause_s: float) -> Decision:
    """What to do after a failed call. `outage`: what is happening ("" for a failure that
    waiting does not mend); `repeatable`: the call is safe to make again; `waited_s`: how
    long this outage has been waited out so far; `pause_s`: the pause before the next try."""
    if not outage or budget_s <= 0:
        return "fail"
    if not repeatable:
        return "not_repeatable"
    if waited_s + pause_s > budget_s:
        return "give_up"
    return "wait"


def waiting_line(outage: str, budget_s: float) -> str:
    return f"{outage}; waiting up to {budget_s:g} s"


def gave_up(message: str, budget_s: float) -> str:
    return f"{message}; still so after waiting {budget_s:g} s (set {WAIT_ENV} to wait longer)"


def not_repeated(message: str) -> str:
    return (
        f"{message}; this request is not sent again by itself, as it may have been carried out: "
        "check, then retry"
    )
