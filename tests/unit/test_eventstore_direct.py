"""The replay's direct delivery (services/common/fast_delivery.py): the messages
of a direct subscription reach its function whole, with their reply subject
and without their headers, however the bytes are cut when they arrive; every
other protocol line and message still reaches nats-py."""

import random

from nats.aio.client import Client

from services.common.fast_delivery import DirectDelivery

DIRECT, OTHER = 7, 9
HEADERS = b"NATS/1.0\r\nNats-Msg-Id: metrics-1-1-a-2\r\nNats-Expected-Last-Subject-Sequence: 12\r\n\r\n"
STATUS = b"NATS/1.0 408 Request Timeout\r\n\r\n"


def hmsg(sid: int, reply: bytes, data: bytes, headers: bytes = HEADERS) -> bytes:
    replied = reply + b" " if reply else b""
    size = len(headers) + len(data)
    return b"HMSG det.events.trial.1 %d %s%d %d\r\n%s%s\r\n" % (
        sid,
        replied,
        len(headers),
        size,
        headers,
        data,
    )


def ack(sequence: int) -> bytes:
    return b"$JS.ACK.EVENTS.consumer.1.%d.%d.1790000000000000000.0" % (sequence, sequence)


# (what arrives, what the direct subscription's function is given)
STREAM = [
    (hmsg(DIRECT, ack(1), b"\x08\x01payload"), (ack(1), b"\x08\x01payload")),
    (hmsg(DIRECT, ack(2), b"with \r\nHMSG inside\r\n"), (ack(2), b"with \r\nHMSG inside\r\n")),
    (hmsg(DIRECT, ack(3), b""), (ack(3), b"")),
    (hmsg(OTHER, b"reply", b"not ours"), None),
    (hmsg(DIRECT, ack(4), b"after another subscription's"), (ack(4), b"after another subscription's")),
    (b"+OK\r\n", None),
    (hmsg(DIRECT, b"", b"", headers=STATUS), (b"", b"")),
    (b"MSG det.events.trial.1 %d %s 5\r\nplain\r\n" % (DIRECT, ack(5)), (ack(5), b"plain")),
    (hmsg(DIRECT, ack(6), b"x" * 5000), (ack(6), b"x" * 5000)),
]


async def delivered(chunks: list[bytes]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """(what the direct subscription's function got, the data nats-py's own dispatch got)."""
    nc = Client()
    direct: list[tuple[bytes, bytes]] = []
    to_nats: list[bytes] = []

    async def nats_dispatch(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes) -> None:
        to_nats.append(data)

    nc._process_msg = nats_dispatch  # type: ignore[method-assign]  # stands for nats-py's
    delivery = DirectDelivery(nc)
    delivery._receivers[DIRECT] = lambda reply, data, subject: direct.append((reply, data))
    for chunk in chunks:
        await nc._ps.parse(chunk)
    return direct, to_nats


def cut(data: bytes, sizes: list[int]) -> list[bytes]:
    chunks, start = [], 0
    for size in sizes:
        chunks.append(data[start : start + size])
        start += size
    return chunks + [data[start:]]


async def test_every_message_arrives_whole_however_the_bytes_are_cut() -> None:
    data = b"".join(sent for sent, _ in STREAM)
    expected = [got for _, got in STREAM if got is not None]
    rng = random.Random(0)
    cuttings = [[at] for at in range(len(data) + 1)]
    cuttings += [[rng.randint(1, 80) for _ in range(len(data) // 20)] for _ in range(200)]
    cuttings += [[rng.randint(1, 3000) for _ in range(10)] for _ in range(200)]
    for sizes in cuttings:
        assert await delivered(cut(data, sizes)) == (expected, [b"not ours"]), sizes
