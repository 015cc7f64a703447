"""Fetching an allocation's context archive across an outage of nats-server.

The fetch is made again once nats-server is back (`Contexts.get`), for up to
CONTEXT_WAIT_S: an outage shorter than that costs the trial time, not a failed
run (and with it one of its `max_restarts`). The agent's log says once that it
waits; past the wait the allocation fails, saying why, as any setup failure does.
"""

import asyncio

import structlog

from services.agent.launch import AgentError
from services.common.connection import Connection, NatsUnavailableError, limit_outage_wait
from services.common.contexts import Contexts

# Long enough for nats-server to be restarted, short enough that a trial is not held for
# ever by a cluster that lost its event log.
CONTEXT_WAIT_S = 300.0
# How often a fetch in progress is looked at, to say that it waits for nats-server.
NOTICE_S = 1.0

log = structlog.get_logger()


class ContextUnavailableError(AgentError):
    """nats-server stayed unreachable for as long as the agent waits for a context."""


async def fetch_context(
    contexts: Contexts,
    connection: Connection,
    digest: str,
    *,
    allocation_id: str,
    wait_s: float = CONTEXT_WAIT_S,
) -> bytes:
    """The archive stored under `digest`, waiting out an outage of up to `wait_s`."""
    fetching = asyncio.create_task(_fetched_within(contexts, digest, wait_s))
    waited = False
    try:
        while not fetching.done():
            await asyncio.wait({fetching}, timeout=NOTICE_S)
            if not fetching.done() and not waited and not connection.nc.is_connected:
                waited = True
                log.warning(
                    "allocation_context_waiting",
                    allocation_id=allocation_id,
                    reason="nats-server is unreachable",
                    wait_s=wait_s,
                )
        data = fetching.result()
    except NatsUnavailableError as error:
        raise ContextUnavailableError(
            f"could not fetch the experiment's context: nats-server stayed unreachable for {wait_s:.0f} s"
            f" ({error})"
        ) from None
    finally:
        fetching.cancel()
    if waited:
        log.info("allocation_context_fetched", allocation_id=allocation_id)
    return data


async def _fetched_within(contexts: Contexts, digest: str, wait_s: float) -> bytes:
    """Run as a task of its own: the outage limit holds for the fetch, not for the
    allocation's other calls (its events wait out an outage of any length)."""
    limit_outage_wait(wait_s)
    return await contexts.get(digest)
