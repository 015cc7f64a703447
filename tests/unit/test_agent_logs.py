"""The agent's log buffer and shipper (services/agent/logs.py): lines wait in
memory, then in a file, then are counted as dropped; they leave in order, in
batches with message ids of their own, once each. The shipper is driven here
through its publish seam; tests/integration/test_agent_logs_outage.py runs it
against a nats-server that goes away."""

import asyncio
from pathlib import Path

import nats.errors
import pytest

from determined.proto import events_pb2 as ev
from services.agent.logs import MAX_BATCH_LINES, SPILL_FILE, LogBuffer, LogShipper, log_line


def line(i: int, size: int = 0) -> ev.LogLine:
    return ev.LogLine(timestamp_ns=i, stdtype="stdout", log=f"line {i}".ljust(size, "."))


def drain(buffer: LogBuffer, max_lines: int = 7, max_bytes: int = 1 << 20) -> list[str]:
    texts: list[str] = []
    while lines := buffer.peek(max_lines, max_bytes):
        texts += [x.log.rstrip(".") for x in lines]
        buffer.pop()
    return texts


def test_lines_wait_in_memory_and_leave_in_order(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / SPILL_FILE, memory_bytes=1 << 20, spill_bytes=1 << 20)
    for i in range(20):
        buffer.add(line(i))
    assert len(buffer) == 20 and not (tmp_path / SPILL_FILE).exists()
    assert [x.log for x in buffer.peek(5, 1 << 20)] == [f"line {i}" for i in range(5)]
    assert [x.log for x in buffer.peek(5, 1 << 20)] == [f"line {i}" for i in range(5)]  # until popped
    buffer.pop()
    assert drain(buffer) == [f"line {i}" for i in range(5, 20)]
    assert len(buffer) == 0 and buffer.peek(5, 100) == []


def test_past_the_memory_limit_lines_wait_in_a_file_and_still_leave_in_order(tmp_path: Path) -> None:
    spill = tmp_path / SPILL_FILE
    buffer = LogBuffer(spill, memory_bytes=200, spill_bytes=1 << 20)
    for i in range(30):
        buffer.add(line(i, 30))
    assert spill.exists() and len(buffer) == 30
    taken = [x.log.rstrip(".") for x in buffer.peek(3, 1 << 20)]
    buffer.pop()
    # Memory has room again, but lines keep following those in the file.
    for i in range(30, 40):
        buffer.add(line(i, 30))
    assert taken + drain(buffer) == [f"line {i}" for i in range(40)]
    assert not spill.exists()  # read to its end: removed
    buffer.add(line(40))
    assert not spill.exists() and drain(buffer) == ["line 40"]


def test_a_batch_is_bounded_by_lines_and_bytes_but_holds_at_least_one_line(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / SPILL_FILE, memory_bytes=400, spill_bytes=1 << 20)
    for i in range(10):
        buffer.add(line(i, 100))  # ~120 bytes each: three in memory, the rest in the file
    sizes = []
    while lines := buffer.peek(100, 250):
        sizes.append(len(lines))
        buffer.pop()
    assert sizes == [2, 1, 2, 2, 2, 1]  # two fit in 250 bytes; a batch is from memory or from the file
    buffer.add(line(99, 1000))
    assert len(buffer.peek(100, 10)) == 1


def test_past_the_file_limit_lines_are_counted_and_a_line_says_how_many(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / SPILL_FILE, memory_bytes=100, spill_bytes=400)
    for i in range(40):
        buffer.add(line(i, 40))
    kept = len(buffer)
    assert 0 < kept < 40 and buffer.dropped == 40 - kept
    texts = drain(buffer)
    assert texts == [f"line {i}" for i in range(kept)]
    buffer.add(line(40))
    buffer.add(line(41))
    after = drain(buffer)
    assert after[0] == (
        f"determined agent: {40 - kept} log lines dropped: the agent's log buffer was full while NATS was"
        " unreachable"
    )
    assert after[1:] == ["line 40", "line 41"]


def test_the_dropped_line_comes_last_when_the_output_ends_while_dropping(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / SPILL_FILE, memory_bytes=100, spill_bytes=200)
    for i in range(20):
        buffer.add(line(i, 40))
    buffer.note_dropped()
    texts = drain(buffer)
    assert texts[-1].startswith("determined agent: ") and "log lines dropped" in texts[-1]
    assert texts[:-1] == [f"line {i}" for i in range(len(texts) - 1)]


def test_without_a_file_lines_past_memory_are_dropped() -> None:
    buffer = LogBuffer(None, memory_bytes=100, spill_bytes=1 << 20)
    for i in range(10):
        buffer.add(line(i, 40))
    assert len(buffer) + buffer.dropped == 10 and 0 < len(buffer) < 10


def test_closing_removes_the_file(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / SPILL_FILE, memory_bytes=10, spill_bytes=1 << 20)
    buffer.add(line(1, 40))
    assert (tmp_path / SPILL_FILE).exists()
    buffer.close()
    assert not (tmp_path / SPILL_FILE).exists() and len(buffer) == 0


# -- the shipper ---------------------------------------------------------------------------


class Log:
    """A publish seam that refuses while `down`, like a store that gave up waiting."""

    def __init__(self) -> None:
        self.down = False
        self.stored: dict[str, ev.LogBatch] = {}
        self.attempts = 0

    async def publish(self, batch: ev.LogBatch, msg_id: str) -> None:
        self.attempts += 1
        if self.down:
            raise nats.errors.TimeoutError
        self.stored.setdefault(msg_id, batch)  # a repeated msg id is stored once


def shipper(log: Log, spill: Path | None = None, memory_bytes: int = 1 << 20) -> LogShipper:
    return LogShipper(
        log.publish,
        trial_id=3,
        allocation_id="3.1",
        agent_id="a",
        spill_path=spill,
        memory_bytes=memory_bytes,
    )


async def test_lines_are_shipped_in_batches_with_ids_and_the_last_says_so() -> None:
    log = Log()
    ship = shipper(log)
    ship.start()
    for i in range(MAX_BATCH_LINES + 10):
        ship.add("stdout", f"line {i}")
    await ship.close()
    assert list(log.stored) == [f"logs-3.1-a-{n}" for n in range(len(log.stored))]
    batches = list(log.stored.values())
    assert [x.log for b in batches for x in b.lines] == [f"line {i}" for i in range(MAX_BATCH_LINES + 10)]
    assert all(len(b.lines) <= MAX_BATCH_LINES for b in batches)
    assert [b.allocation_ended for b in batches] == [False] * (len(batches) - 1) + [True]
    assert {(b.trial_id, b.allocation_id, b.agent_id) for b in batches} == {(3, "3.1", "a")}


async def test_an_allocation_with_no_output_still_ends_its_logs() -> None:
    log = Log()
    await shipper(log).close()
    [batch] = log.stored.values()
    assert batch.allocation_ended and not batch.lines


async def test_while_publishing_fails_lines_wait_then_leave_in_order_once(tmp_path: Path) -> None:
    log = Log()
    ship = shipper(log, tmp_path / SPILL_FILE, memory_bytes=500)
    ship.start()
    ship.add("stdout", "before")
    for _ in range(100):
        if log.stored:
            break
        await asyncio.sleep(0.01)
    log.down = True
    for i in range(200):
        ship.add("stdout", f"during {i}")  # never waits
    await asyncio.sleep(0.3)
    assert (tmp_path / SPILL_FILE).exists() and log.attempts > 2
    log.down = False
    await ship.close()
    texts = [x.log for b in log.stored.values() for x in b.lines]
    assert texts == ["before"] + [f"during {i}" for i in range(200)]
    assert not (tmp_path / SPILL_FILE).exists()


async def test_a_batch_nats_will_never_take_is_dropped_and_shipping_goes_on() -> None:
    stored: list[ev.LogBatch] = []

    async def publish(batch: ev.LogBatch, msg_id: str) -> None:
        if any(x.log == "poison" for x in batch.lines):
            raise nats.errors.MaxPayloadError
        stored.append(batch)

    ship = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a")
    ship.start()
    ship.add("stdout", "poison")
    await asyncio.sleep(0.2)
    ship.add("stdout", "after")
    await ship.close()
    assert [x.log for b in stored for x in b.lines] == ["after"] and stored[-1].allocation_ended


@pytest.mark.parametrize("stdtype", ["stdout", "stderr"])
async def test_follow_reads_a_pipe_to_its_end(stdtype: str) -> None:
    log = Log()
    ship = shipper(log)
    reader = asyncio.StreamReader()
    reader.feed_data(b"one\ntwo\r\nno newline")
    reader.feed_eof()
    await ship.follow(reader, stdtype)
    await ship.close()
    lines = [(x.stdtype, x.log) for b in log.stored.values() for x in b.lines]
    assert lines == [(stdtype, "one"), (stdtype, "two\r"), (stdtype, "no newline")]


def test_a_file_that_cannot_be_written_loses_its_lines_not_the_trial(tmp_path: Path) -> None:
    buffer = LogBuffer(tmp_path / "no-such-folder" / SPILL_FILE, memory_bytes=100, spill_bytes=1 << 20)
    for i in range(5):
        buffer.add(line(i, 40))
    texts = drain(buffer)
    assert texts[0] == "line 0" and 0 < buffer.dropped <= 4
    buffer.note_dropped()
    assert "log lines dropped" in drain(buffer)[0]


def test_a_rank_prefix_becomes_the_lines_rank() -> None:
    tagged = log_line("stdout", "[rank=3] loss 0.5", 7)
    assert (tagged.log, tagged.rank, tagged.stdtype, tagged.timestamp_ns) == ("loss 0.5", 3, "stdout", 7)
    assert (
        log_line("stderr", "[rank=0] ", 0).HasField("rank") and log_line("stderr", "[rank=0] ", 0).log == ""
    )
    for text in ("loss 0.5", " [rank=1] x", "[rank=1]x", "[rank=x] y", "[rank=-1] y", "[rank=1234567890] y"):
        plain = log_line("stdout", text, 0)
        assert (plain.log, plain.HasField("rank")) == (text, False)
    assert log_line("stdout", "[rank=1] [rank=2] x", 0).log == "[rank=2] x"  # only the leading one


async def test_the_shipper_ships_lines_with_their_ranks() -> None:
    batches: list[ev.LogBatch] = []

    async def publish(batch: ev.LogBatch, msg_id: str) -> None:
        batches.append(batch)

    shipper = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a")
    shipper.add("stdout", "[rank=1] hello")
    shipper.add("stdout", "plain")
    await shipper.close()
    lines = [line for batch in batches for line in batch.lines]
    assert [(x.log, x.rank if x.HasField("rank") else None) for x in lines] == [("hello", 1), ("plain", None)]
