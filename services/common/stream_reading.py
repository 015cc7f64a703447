"""Reading a JetStream stream in order, as fast as a reader takes it, across
outages of nats-server: what the event store and the trial logs read through.

What is stored when a read starts is replayed through pull consumers, one
per subject, merged in stream order, or, for several exact subjects (a few
aggregates), through batched direct gets of each; with `follow`, ordered
push consumers, one per subject, then follow from the end of the replay (see
`read_batches`). The messages of a pull consumer reach it through
fast_delivery.py.
"""

import asyncio
import collections
import contextlib
import functools
import hashlib
import heapq
import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from services.common.connection import Connection
from services.common.fast_delivery import delivery_for

# A follower holds at most this many delivered, unread messages (see _followed_batches).
READ_BUFFER = 10_000
# A replay asks for this many messages per pull request, at most PULL_AHEAD
# not yet read; a pull consumer that delivers nothing for PULL_STALL_S is made again.
PULL_BATCH = 2_000
PULL_AHEAD = 2 * PULL_BATCH
PULL_STALL_S = 5.0
# A replay of exact subjects asks for at most DIRECT_BATCH messages (DIRECT_BATCH_BYTES)
# of a subject per direct get, with at most DIRECT_IN_FLIGHT gets unanswered.
DIRECT_BATCH = 1_000
DIRECT_BATCH_BYTES = 1024**2
DIRECT_IN_FLIGHT = 64
# $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>
JS_ACK_V1_TOKENS = 9

log = structlog.get_logger()

# A message as read from a stream: (sequence, data, caught_up, subject).
Raw = tuple[int, bytes, bool, str]


class _Stalled(Exception):
    """A pull consumer delivered nothing for PULL_STALL_S (lost in an outage)."""


class StreamReader:
    """Reads the streams of one connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._direct = delivery_for(connection.nc)
        self._direct_gets = asyncio.Semaphore(DIRECT_IN_FLIGHT)

    @property
    def js(self) -> JetStreamContext:
        return self.connection.jetstream()

    async def read(
        self, stream: str, subjects: list[str], start_sequence: int, follow: bool
    ) -> AsyncGenerator[Raw, None]:
        """(sequence, data, caught_up, subject) in order, one at a time (see read_batches)."""
        async with contextlib.aclosing(self.read_batches(stream, subjects, start_sequence, follow)) as read:
            async for batch in read:
                for message in batch:
                    yield message

    async def read_batches(
        self, stream: str, subjects: list[str], start_sequence: int, follow: bool
    ) -> AsyncGenerator[list[Raw], None]:
        """(sequence, data, caught_up, subject) in order, in lists of whatever has
        arrived; caught_up is True on the last message that was stored when it
        was delivered.

        What is stored when the read starts is replayed through pull
        consumers (`_pulled_batches`): asked for in batches, so a reader that
        is slower than nats-server holds two batches at most. A push
        consumer would outrun it: past its flow-control window nats-server
        waits, but nats-py answers the "stalled" heartbeat that follows every
        idle_heartbeat whether or not the reader took what it holds, so a
        slow reader's buffer grows by a window per heartbeat (1 GB on a
        replay of a million events). Several subjects are replayed each on
        its own, merged in stream order (`_merged_batches`): those with
        wildcards (kinds) through a consumer each, as nats-server 2.15
        serves a consumer of several such filters 5 to 15 times slower than
        one of a single filter; exact subjects (aggregates, which hold a few
        events each) through batched direct gets (`_direct_batches`), which
        nats-server answers from its index of subjects, where a consumer of
        several filters scans the stream from `start_sequence` (150 ms on a
        million events). Such a get names no subject in its API subject, so
        only a reader that may read everything (the gateway, `operator`)
        can make it. With `follow`, an ordered push consumer then follows
        from the end of the replay."""
        stored_end = await self.last_sequence_of(stream, subjects)
        if stored_end >= start_sequence:
            if len(subjects) == 1:
                replay = self._pulled_batches(stream, subjects[0], start_sequence, stored_end)
            else:
                replay = self._merged_batches(stream, subjects, start_sequence, stored_end)
            try:
                async for batch in replay:
                    yield batch
            finally:
                await replay.aclose()
            start_sequence = stored_end + 1
        if follow:
            async with contextlib.aclosing(
                self._followed_batches(stream, subjects, start_sequence)
            ) as followed:
                async for batch in followed:
                    yield batch

    async def _followed_batches(
        self, stream: str, subjects: list[str], start_sequence: int
    ) -> AsyncGenerator[list[Raw], None]:
        """Follows the log from `start_sequence`: one ordered push consumer per
        subject (`_Follower`), merged in stream order. Not one consumer of
        several filters: its create request names no filter, so nats-server's
        permissions could not narrow what a part reads (deploy/local/credentials.py).

        A message is passed on once no other subject can still deliver an
        older one: its follower holds a newer one, or the stream holds nothing
        of its subject that it has not delivered (`_in_order`)."""
        arrived = asyncio.Event()
        followers = [_Follower(subject, max(start_sequence, 1), arrived) for subject in subjects]
        try:
            for follower in followers:
                subscribe = functools.partial(self._ordered_consumer, stream, follower)
                follower.sub = await self.connection.call(subscribe)
            while True:
                await arrived.wait()
                arrived.clear()
                # Again until nothing more can be passed on: what one batch took may let more go.
                while batch := await self._in_order(stream, followers):
                    yield batch
        finally:
            for follower in followers:
                if follower.sub is not None:
                    await follower.sub.unsubscribe()

    async def _ordered_consumer(self, stream: str, follower: "_Follower") -> Subscription:
        """An ordered push consumer of the follower's subject from its next
        expected sequence, taken by its callback (not `next_msg`: a task and
        a timer per message). It goes on by itself after an outage, from the
        last sequence it received + 1, or from sequence 1 when it had received
        nothing yet (the follower drops what is below what it expects)."""
        return await self.js.subscribe(  # a new config per attempt: nats-py fills it in
            follower.subject,
            stream=stream,
            ordered_consumer=True,
            idle_heartbeat=2.0,
            cb=follower.take,
            # nats-py drops what passes these limits (and its ordered consumer
            # then skips it for good): bounded by `take` instead.
            pending_msgs_limit=0,
            pending_bytes_limit=0,
            config=_NamedByInbox(
                deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=follower.expected,
            ),
        )

    async def _in_order(self, stream: str, followers: "list[_Follower]") -> list[Raw]:
        """Takes what the followers hold up to the newest sequence below which
        none can deliver anything more, merged in stream order. A follower
        that holds nothing bounds it at what it delivered last, unless the
        stream holds nothing newer of its subject (asked of the stream, all
        such followers at once). caught_up is True on the last message taken
        when it was the newest of its subject when delivered and nothing is
        left held."""
        held = [follower.held[-1][0] for follower in followers if follower.held]
        if not held:
            return []
        newest_held = max(held)
        bounds = [follower.held[-1][0] for follower in followers if follower.held]
        unsure = [f for f in followers if not f.held and f.delivered < newest_held]
        newest = await asyncio.gather(*(self.last_sequence_of(stream, [f.subject]) for f in unsure))
        bounds += [f.delivered for f, last in zip(unsure, newest, strict=True) if last > f.delivered]
        bound = min(bounds)
        taken = list(heapq.merge(*(follower.taken_until(bound) for follower in followers)))
        done = not any(follower.held for follower in followers)
        return [
            (sequence, data, done and index == len(taken) - 1 and pending == 0, subject)
            for index, (sequence, data, pending, subject) in enumerate(taken)
        ]

    async def _pulled_batches(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """The messages of `subject` from `start_sequence` to `end` (stored
        already), through an ephemeral pull consumer: PULL_BATCH messages per
        request, at most PULL_AHEAD asked for and not yet read. A consumer
        that delivers nothing for PULL_STALL_S (lost in an outage of
        nats-server) is made again from the next expected sequence."""
        expected = max(start_sequence, 1)
        while expected <= end:
            try:
                async with contextlib.aclosing(self._pulled_once(stream, subject, expected, end)) as batches:
                    async for batch in batches:
                        expected = batch[-1][0] + 1
                        yield batch
                return  # the attempt read every message of `subject` up to `end`
            except _Stalled:
                log.info("replay_consumer_remade", subject=subject, from_sequence=expected)

    async def _pulled_once(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """One attempt of _pulled_batches: ends early (without error) when its
        consumer stalls; its inbox goes with it, so that nothing it asked for
        arrives later."""
        arrived: collections.deque[tuple[bytes, bytes, bytes]] = collections.deque()
        waiting = asyncio.Event()

        def take(reply: bytes, data: bytes, stored_on: bytes) -> None:
            arrived.append((reply, data, stored_on))
            waiting.set()

        made = functools.partial(self._pull_consumer, stream, subject, start_sequence)
        consumer, stored = await self.connection.call(made)
        nc = self.connection.nc
        inbox = nc.new_inbox()
        sub = await self._direct.subscribe(inbox, take)
        expected, requested, received = start_sequence, 0, 0
        try:
            while expected <= end and received < stored:
                while requested < min(stored, received + PULL_AHEAD):
                    size = min(PULL_BATCH, stored - requested)
                    request = json.dumps({"batch": size}).encode()
                    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}", request, inbox)
                    requested += size
                try:
                    async with asyncio.timeout(PULL_STALL_S):
                        await waiting.wait()
                except TimeoutError:
                    raise _Stalled from None
                waiting.clear()
                batch = []
                while arrived:
                    reply, data, stored_on = arrived.popleft()
                    if not reply:
                        continue  # a status (408 and the like): what it says, the stall timeout covers
                    received += 1
                    sequence = _stream_sequence(reply)
                    if expected <= sequence <= end:
                        expected = sequence + 1
                        batch.append((sequence, data, sequence == end, stored_on.decode(errors="replace")))
                if batch:
                    yield batch
        finally:
            await self._direct.unsubscribe(sub)
            await self._delete_consumer(stream, consumer)

    async def _pull_consumer(self, stream: str, subject: str, start_sequence: int) -> tuple[str, int]:
        """An ephemeral pull consumer of `subject` from `start_sequence`, and
        how many of its messages are stored."""
        config = js_api.ConsumerConfig(
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_sequence,
            ack_policy=js_api.AckPolicy.NONE,
            filter_subject=subject,
            inactive_threshold=PULL_STALL_S * 4,
            mem_storage=True,
            # Named: nats-py then creates it through the API subject that names its filter.
            name=uuid.uuid4().hex,
        )
        info = await self.js.add_consumer(stream, config)
        return info.name, info.num_pending or 0

    async def _delete_consumer(self, stream: str, consumer: str) -> None:
        """Best effort: an ephemeral consumer goes by itself when inactive."""
        with contextlib.suppress(nats.errors.Error, asyncio.TimeoutError):
            await self.js.delete_consumer(stream, consumer)

    async def _merged_batches(
        self, stream: str, subjects: list[str], start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """The messages of several subjects from `start_sequence` to `end`, all
        stored already, in stream order: each subject read on its own (a
        pull consumer of a wildcard subject, direct gets of an exact one:
        see `read_batches`), the next batches of all those whose last one
        is taken asked for at once, merged. A message is passed on once
        every reader that is not done holds one at least as new; caught_up
        is True on `end`."""
        readers = {
            subject: self._subject_batches(stream, subject, start_sequence, end) for subject in subjects
        }
        held: dict[str, collections.deque[Raw]] = {s: collections.deque() for s in subjects}
        done: set[str] = set()
        try:
            while True:
                empty = [s for s in subjects if s not in done and not held[s]]
                # All of them end before any is closed (`finally`): one may fail.
                batches = await asyncio.gather(
                    *(anext(readers[s], None) for s in empty), return_exceptions=True
                )
                for subject, batch in zip(empty, batches, strict=True):
                    if isinstance(batch, BaseException):
                        raise batch
                    if batch is None:
                        done.add(subject)
                    else:
                        held[subject].extend(batch)
                waiting = [held[subject][-1][0] for subject in subjects if subject not in done]
                bound = min(waiting, default=end)
                ready = heapq.merge(*(_taken_until(messages, bound) for messages in held.values()))
                merged = [(sequence, data, sequence == end, subject) for sequence, data, _, subject in ready]
                if merged:
                    yield merged
                if len(done) == len(subjects) and not any(held.values()):
                    return
        finally:
            for reader in readers.values():
                await reader.aclose()

    def _subject_batches(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        if _is_wildcard(subject):
            return self._pulled_batches(stream, subject, start_sequence, end)
        return self._direct_batches(stream, subject, start_sequence, end)

    async def _direct_batches(
        self, stream: str, subject: str, start_sequence: int, end: int
    ) -> AsyncGenerator[list[Raw], None]:
        """The messages of one exact subject from `start_sequence` to `end`
        (stored already), by batched direct gets (`_direct_batch`), each
        from the sequence after the last one received."""
        expected = max(start_sequence, 1)
        while expected <= end:
            get = functools.partial(self._direct_batch, stream, subject, expected)
            received, pending = await self.connection.call(get)
            batch = [message for message in received if message[0] <= end]
            if batch:
                expected = batch[-1][0] + 1
                yield batch
            if pending == 0 or len(batch) < len(received) or not received:
                return

    async def _direct_batch(
        self, stream: str, subject: str, start_sequence: int, batch: int = DIRECT_BATCH
    ) -> tuple[list[Raw], int]:
        """(the next messages of `subject` from `start_sequence`, how many more
        it holds after them): one direct get of DIRECT_BATCH messages at most,
        answered by the messages then an end-of-batch status (204), or a 404
        when there are none. nats.errors.TimeoutError (an outage: the caller
        asks again) when no end comes within PULL_STALL_S."""
        received: list[Raw] = []
        ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def take(msg: Msg) -> None:
            if ended.done():
                return
            headers = msg.headers or {}
            status = headers.get(js_api.Header.STATUS.value)
            if status is None:
                received.append((int(headers["Nats-Sequence"]), msg.data, False, headers["Nats-Subject"]))
            elif status == "204":
                ended.set_result(int(headers.get("Nats-Num-Pending", "0")))
            elif status == "404":
                ended.set_result(0)
            else:
                ended.set_exception(nats.errors.NoRespondersError() if status == "503" else _refused(msg))

        request = {
            "seq": start_sequence,
            "next_by_subj": subject,
            "batch": batch,
            "max_bytes": DIRECT_BATCH_BYTES,
        }
        nc = self.connection.nc
        async with self._direct_gets:
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox, cb=take)
            try:
                await nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(request).encode(), inbox)
                async with asyncio.timeout(PULL_STALL_S):
                    pending = await ended
            except TimeoutError:
                raise nats.errors.TimeoutError from None
            finally:
                await sub.unsubscribe()
        return received, pending

    async def first_from(self, stream: str, subject: str, start_sequence: int) -> tuple[int, int]:
        """(the sequence of the subject's first message from `start_sequence`,
        how many it holds from there), (0, 0) when none: one direct get (the
        gateway's, see `read_batches`), answered from nats-server's index of
        subjects. What a search for the start of a trial's last log batches asks."""
        get = functools.partial(self._direct_batch, stream, subject, max(start_sequence, 1), 1)
        received, pending = await self.connection.call(get)
        return (received[0][0], 1 + pending) if received else (0, 0)

    async def messages_at(self, stream: str, sequences: list[int]) -> list[Raw]:
        """The messages stored at these sequences, in their order (one stored
        at none is left out): a direct get of each (the gateway's, see
        `read_batches`), DIRECT_BATCH asked at once, so that a page of
        scattered events (an index's: det events by type) costs a round trip,
        not one per event."""
        found: list[Raw] = []
        for first in range(0, len(sequences), DIRECT_BATCH):
            chunk = sequences[first : first + DIRECT_BATCH]
            found += await self.connection.call(functools.partial(self._messages_at, stream, chunk))
        return found

    async def _messages_at(self, stream: str, sequences: list[int]) -> list[Raw]:
        """One attempt of messages_at: every get asked, answered on one inbox
        (its last token: the get's index); nats.errors.TimeoutError (an
        outage: the caller asks again) when not all are answered within PULL_STALL_S."""
        received: dict[int, Raw] = {}
        answered = 0
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def take(msg: Msg) -> None:
            nonlocal answered
            if ended.done():
                return
            headers = msg.headers or {}
            status = headers.get(js_api.Header.STATUS.value)
            if status is None:
                index = int(msg.subject.rsplit(".", 1)[1])
                received[index] = (int(headers["Nats-Sequence"]), msg.data, False, headers["Nats-Subject"])
            elif status != "404":
                ended.set_exception(nats.errors.NoRespondersError() if status == "503" else _refused(msg))
                return
            answered += 1
            if answered == len(sequences):
                ended.set_result(None)

        nc = self.connection.nc
        inbox = nc.new_inbox()
        sub = await nc.subscribe(f"{inbox}.*", cb=take, pending_msgs_limit=0, pending_bytes_limit=0)
        try:
            api = f"$JS.API.DIRECT.GET.{stream}"
            for index, sequence in enumerate(sequences):
                await nc.publish(api, b'{"seq":%d}' % sequence, f"{inbox}.{index}")
            async with asyncio.timeout(PULL_STALL_S):
                await ended
        except TimeoutError:
            raise nats.errors.TimeoutError from None
        finally:
            await sub.unsubscribe()
        return [received[index] for index in sorted(received)]

    async def last_sequence_of(self, stream: str, subjects: list[str]) -> int:
        """The sequence of the newest message on any of these subjects (0 if none).

        Asked of the stream, not of a new consumer: a consumer's pending count
        can still read 0 just after it is created."""
        return await self.connection.call(lambda: self._newest_of(stream, subjects))

    async def _newest_of(self, stream: str, subjects: list[str]) -> int:
        """Asked for all subjects at once: an experiment's read names hundreds."""
        return max(await asyncio.gather(*(self._newest_of_one(stream, s) for s in subjects)), default=0)

    async def _newest_of_one(self, stream: str, subject: str) -> int:
        try:
            msg = await self.js.get_last_msg(stream, subject, direct=True)
        except nats.js.errors.NotFoundError:
            return 0
        return msg.seq or 0


@dataclass
class _NamedByInbox(js_api.ConsumerConfig):
    """An ordered push consumer's config whose name follows its delivery
    inbox. nats-py creates a consumer that has a name (and one filter)
    through `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, the form
    whose filter nats-server's permissions check; and it makes an ordered
    consumer again after a gap from this config with a new inbox, so the
    new consumer gets a new name (dataclasses.replace runs __post_init__)."""

    def __post_init__(self) -> None:
        if self.deliver_subject:
            self.name = hashlib.sha256(self.deliver_subject.encode()).hexdigest()[:32]


class _Follower:
    """What one ordered consumer of one subject delivered and the reader has
    not taken yet: at most READ_BUFFER messages, then its callback waits."""

    def __init__(self, subject: str, start_sequence: int, arrived: asyncio.Event) -> None:
        self.subject = subject
        # Every message of the subject below it has been delivered (or precedes the read).
        self.expected = start_sequence
        # (sequence, data, messages pending when delivered, subject)
        self.held: collections.deque[tuple[int, bytes, int, str]] = collections.deque()
        self.sub: Subscription | None = None
        self._arrived = arrived
        self._room = asyncio.Event()
        self._room.set()

    @property
    def delivered(self) -> int:
        return self.expected - 1

    async def take(self, msg: Msg) -> None:
        sequence, pending = _stream_position(msg.reply)
        if sequence >= self.expected:  # below: a consumer that started over repeats them
            self.expected = sequence + 1
            self.held.append((sequence, msg.data, pending, msg.subject))
            self._arrived.set()
        if len(self.held) >= READ_BUFFER:
            self._room.clear()
            await self._room.wait()

    def taken_until(self, bound: int) -> list[tuple[int, bytes, int, str]]:
        taken = []
        while self.held and self.held[0][0] <= bound:
            taken.append(self.held.popleft())
        self._room.set()
        return taken


def _refused(msg: Msg) -> nats.js.errors.APIError:
    """A direct get's error status (a 400: a malformed request) as an error."""
    headers = msg.headers or {}
    description = str(headers.get(js_api.Header.DESCRIPTION, ""))
    return nats.js.errors.APIError(
        code=int(headers.get(js_api.Header.STATUS.value, "0")), description=description
    )


def _is_wildcard(subject: str) -> bool:
    return any(token in ("*", ">") for token in subject.split("."))


def _taken_until(messages: "collections.deque[Raw]", bound: int) -> list[Raw]:
    """Takes the messages up to sequence `bound` off the front of `messages`."""
    taken = []
    while messages and messages[0][0] <= bound:
        taken.append(messages.popleft())
    return taken


def _stream_sequence(reply: bytes) -> int:
    """The stream sequence of a delivered JetStream message, from its reply subject."""
    tokens = reply.split(b".")
    if len(tokens) == JS_ACK_V1_TOKENS:
        return int(tokens[5])
    return _stream_position(reply.decode())[0]


def _stream_position(reply: str) -> tuple[int, int]:
    """(stream sequence, messages pending) of a delivered JetStream message,
    read from its reply subject without building nats-py's Metadata (which
    costs a datetime per message)."""
    tokens = Msg.Metadata._get_metadata_fields(reply)
    if len(tokens) == JS_ACK_V1_TOKENS:
        return int(tokens[5]), int(tokens[8])
    return int(tokens[Msg.Ack.StreamSeq]), int(tokens[Msg.Ack.NumPending])
