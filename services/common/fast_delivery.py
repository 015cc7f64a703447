"""How a replay receives the messages its pull consumers deliver: straight
from the bytes nats-py reads, past its message path, on the nats-py this was
written for; through nats-py's public API on any other.

nats-py builds every delivered message: parses its headers with a
general-purpose parser (a stored event carries two, Nats-Msg-Id and the
expected sequence), decodes subject and reply, makes a Msg, queues it to the
subscription's task, which awaits the callback: ~25 µs per message, as much as
the rest of a replay. A replay needs only the reply subject (the stream
sequence is in it), the data and the subject (which a reader checks the
event against: wellformed.py). So `DirectDelivery` replaces two private parts
of the client: its protocol parser (`_ps`) by one that hands these
subscriptions' messages over as they come (`_DirectParser`: ~3 µs each), and
its dispatch (`_process_msg`, which nats-py's parser calls with each message's
parts) by one that hands over those nats-py's parser takes (after any other
protocol line). Headers are never parsed. Every other message takes nats-py's
own path.

Those private parts are as nats-py WRITTEN_FOR has them (pyproject.toml pins
it). On any other nats-py, `delivery_for` gives `PublicDelivery` instead: a
subscription with a callback, the same messages, slower; and says why once in
the log (`nats_fast_read_off`).
"""

import functools
from collections.abc import Callable
from typing import Protocol

import nats.aio.client
import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

# The nats-py whose private parser and dispatch DirectDelivery replaces.
WRITTEN_FOR = "2.16.0"

# Given each message as (reply subject, data, subject).
Receiver = Callable[[bytes, bytes, bytes], None]

log = structlog.get_logger()


class Delivery(Protocol):
    """Subscriptions whose messages go to a plain function, in the order they arrive."""

    async def subscribe(self, subject: str, receive: Receiver) -> Subscription: ...

    async def unsubscribe(self, sub: Subscription) -> None: ...


def delivery_for(nc: NatsClient) -> Delivery:
    """DirectDelivery on the nats-py it was written for, else PublicDelivery (logged once)."""
    reason = fast_path_refused(nats.aio.client.__version__, nc)
    if reason is None:
        return DirectDelivery(nc)
    _said_once(reason)
    return PublicDelivery(nc)


def fast_path_refused(version: str, nc: NatsClient) -> str | None:
    """Why DirectDelivery must not patch this client, None when it may."""
    if version != WRITTEN_FOR:
        return f"nats-py is {version}; the fast path was written for {WRITTEN_FOR}"
    if not isinstance(getattr(nc, "_ps", None), Parser) or not callable(getattr(nc, "_process_msg", None)):
        return "nats-py's client has no protocol parser or dispatch to replace"
    return None


@functools.cache
def _said_once(reason: str) -> None:
    log.warning(
        "nats_fast_read_off",
        reason=reason,
        effect="replays read stored events through nats-py's public API: correct, slower",
    )


class PublicDelivery:
    """nats-py's own path: a subscription with a callback."""

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc

    async def subscribe(self, subject: str, receive: Receiver) -> Subscription:
        async def take(msg: Msg) -> None:
            receive(msg.reply.encode(), msg.data, msg.subject.encode())

        # No limits: what the subscription holds is bounded by the pull requests.
        return await self._nc.subscribe(subject, cb=take, pending_msgs_limit=0, pending_bytes_limit=0)

    async def unsubscribe(self, sub: Subscription) -> None:
        await sub.unsubscribe()


class DirectDelivery:
    """Hands the messages of its subscriptions straight to their function,
    past nats-py's message path (see the module's docstring)."""

    def __init__(self, nc: NatsClient) -> None:
        self._receivers: dict[int, Receiver] = {}
        self._nats_dispatch = nc._process_msg
        self._nc = nc
        nc._process_msg = self._dispatch  # type: ignore[method-assign]
        nc._ps = _DirectParser(nc, self._receivers)

    async def subscribe(self, subject: str, receive: Receiver) -> Subscription:
        # Without a callback nats-py starts no task for it; nothing reaches its queue.
        sub = await self._nc.subscribe(subject, pending_msgs_limit=0, pending_bytes_limit=0)
        self._receivers[sub._id] = receive
        return sub

    async def unsubscribe(self, sub: Subscription) -> None:
        self._receivers.pop(sub._id, None)
        await sub.unsubscribe()

    async def _dispatch(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        receive = self._receivers.get(sid)
        if receive is None:
            await self._nats_dispatch(sid, subject, reply, data, headers)
        else:
            receive(reply, data, subject)


class _DirectParser(Parser):
    """nats-py's protocol parser, but the messages of direct subscriptions
    (`HMSG <subject> <sid> <reply> <header bytes> <total bytes>`) at the
    front of what arrived are handed over first, cut out of the buffer by
    offsets; from the first other protocol line on, nats-py's parser takes
    the rest."""

    def __init__(self, nc: NatsClient, receivers: dict[int, Receiver]) -> None:
        super().__init__(nc)
        self._receivers = receivers

    async def parse(self, data: bytes = b"") -> None:
        self.buf.extend(data)
        if self.state != AWAITING_CONTROL_LINE or not self._handed_over():
            await super().parse()

    def _handed_over(self) -> bool:
        """Hands over the direct messages at the front of the buffer; True
        when what is left is nothing or the start of one (to be completed by
        what arrives next)."""
        buf, taken = self.buf, 0
        try:
            while buf.startswith(b"HMSG ", taken):
                end_of_line = buf.find(b"\r\n", taken)
                if end_of_line < 0:
                    return True
                fields = buf[taken:end_of_line].split(b" ")
                receive = self._receivers.get(int(fields[2])) if len(fields) == 6 else None
                if receive is None:
                    return False
                payload, end = end_of_line + 2 + int(fields[4]), end_of_line + 2 + int(fields[5])
                if len(buf) < end + 2:
                    return True
                receive(bytes(fields[3]), bytes(buf[payload:end]), bytes(fields[1]))
                taken = end + 2
            return len(buf) == taken
        finally:
            del buf[:taken]
