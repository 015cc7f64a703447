"""How far behind the log each service and agent is, as nats-server sees it.

A service follows the log with one ordered push consumer per kind of event it
reads (services/common/stream_reading.py), delivering to its own inbox:
`_INBOX.<its nats-server user>.…` (services/common/settings.py
`inbox_prefix`: scheduler, searcher, checkpoint, `agent:<agent id>`). The
stream's consumer list (one request per PAGE consumers) gives each consumer's
deliver subject, filter and `num_pending`: the events of its filter that
nats-server stores and has not delivered yet. A reader's lag is the sum over
the kinds it reads; where two consumers of one reader read one kind (two
processes of one service, or a consumer being replaced after an outage), the
one further behind counts.

What this does not see: events delivered and not yet folded (at most the
reader's buffer, services/common/stream_reading.py READ_BUFFER per kind); a
reader replaying at its start (its pull consumers name no user) or down (it
has no consumer): it shows `det_consumer_following 0` then. Consumers of no
known service (the gateway's own, `operator`'s tools, clusters without
nats-server users) are left out: the projector's lag is its own position's.
The gateway runs none of the services' code for this.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from nats.js.client import JetStreamContext

from services.common.ownership import READS

# The services that follow the log (an agent is `agent:<agent id>`).
SERVICES = tuple(sorted(part for part in READS if part != "agent"))
AGENT_PREFIX = "agent:"
# nats-server's page of the consumer list, and the most pages read per scrape.
PAGE = 256
MAX_PAGES = 8


@dataclass(frozen=True)
class Consumer:
    deliver_subject: str
    filter_subject: str
    # Events of its filter stored and not delivered yet.
    pending: int


def reader_of(deliver_subject: str) -> str | None:
    """The service or agent (`agent:<id>`) a consumer delivers to; None for
    any other (a pull consumer, the gateway, operator, an inbox of no user)."""
    parts = deliver_subject.split(".")
    if len(parts) < 3 or parts[0] != "_INBOX":
        return None
    user = parts[1].replace("~", ".")  # inbox_prefix writes an agent id's '.' as '~'
    if user in SERVICES or (user.startswith(AGENT_PREFIX) and len(user) > len(AGENT_PREFIX)):
        return user
    return None


def lags(consumers: Iterable[Consumer]) -> dict[str, int]:
    """Each reader's events not yet delivered: the sum over the kinds it reads
    of its furthest-behind consumer of that kind. Every service appears (0
    behind when it has no consumer: `following` tells)."""
    furthest: dict[tuple[str, str], int] = {}
    for consumer in consumers:
        reader = reader_of(consumer.deliver_subject)
        if reader is not None:
            key = (reader, consumer.filter_subject)
            furthest[key] = max(furthest.get(key, 0), consumer.pending)
    behind = dict.fromkeys(SERVICES, 0)
    for (reader, _), pending in furthest.items():
        behind[reader] = behind.get(reader, 0) + pending
    return behind


def following(consumers: Iterable[Consumer]) -> dict[str, bool]:
    """Whether each service (and each agent seen) follows the log now."""
    seen = {reader for consumer in consumers if (reader := reader_of(consumer.deliver_subject)) is not None}
    return {reader: reader in seen for reader in sorted(set(SERVICES) | seen)}


async def consumers_of(js: JetStreamContext, stream: str) -> list[Consumer]:
    """The stream's push consumers, at most MAX_PAGES pages of them."""
    found: list[Consumer] = []
    for page in range(MAX_PAGES):
        infos = await js.consumers_info(stream, offset=page * PAGE)
        found += [
            Consumer(
                info.config.deliver_subject or "", info.config.filter_subject or "", info.num_pending or 0
            )
            for info in infos
            if info.config.deliver_subject
        ]
        if len(infos) < PAGE:
            break
    return found
