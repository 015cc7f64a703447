"""What a restarted agent of the Docker runtime keeps: the allocations whose
containers an earlier run left (the core does not close them as lost, the
work dir's sweep leaves their folders), and where their logs resume."""

import asyncio
import base64
import json
from pathlib import Path

from test_agent_core import boot, fold, placed

from determined.proto import events_pb2 as ev
from services.agent.core import AgentCore
from services.agent.folders import AllocationFolder, plan_start_up
from services.agent.logs import LogShipper, ShippedProgress, read_progress, timestamp_ns


def test_an_adopted_allocation_stays_open_and_the_others_are_closed() -> None:
    this = AgentCore("a", "boot-2", adopted=frozenset({"1.1", "9.1"}))
    state = fold(this, boot("boot-1"), *placed("1.1"), *placed("2.1"), boot("boot-2"))
    assert state.registered
    assert not state.allocations["1.1"].orphaned and state.allocations["2.1"].orphaned
    assert [a.payload.allocation_id for a in this.decide(state)] == ["2.1"]


def test_adoption_holds_only_for_the_runs_first_registration() -> None:
    """After an AgentLost the run registers again and kills what it had: nothing is adopted then."""
    this = AgentCore("a", "boot-2", adopted=frozenset({"1.1"}))
    state = fold(this, boot("boot-1"), *placed("1.1"), boot("boot-2"))
    lost = ev.AgentLost(agent_id="a", registration_event_id=state.registration_event_id)
    state = fold(this, boot("boot-1"), *placed("1.1"), boot("boot-2"), lost, boot("boot-2-1"))
    assert state.allocations["1.1"].orphaned


def test_an_adopted_allocations_folder_is_left_alone_at_start_up() -> None:
    folders = [AllocationFolder("1.1"), AllocationFolder("2.1")]
    plan = plan_start_up("a", folders, now=100.0, keep_failed_s=0.0, keep={"1.1"})
    assert plan.lost == () and plan.remove == ("2.1",)


def test_dockers_timestamps_to_the_nanosecond() -> None:
    assert timestamp_ns("1970-01-01T00:00:01.000000002Z") == 1_000_000_002
    assert timestamp_ns("2026-11-27T14:00:00.5Z") == 1795788000_500_000_000
    assert timestamp_ns("2026-11-27T14:00:00Z") == 1795788000_000_000_000
    assert timestamp_ns("not a time") == 0
    assert timestamp_ns("2026-11-27T14:00:00.x1Z") == 0


def test_progress_reads_back_and_a_bad_file_is_none(tmp_path: Path) -> None:
    path = tmp_path / "logs-shipped.json"
    assert read_progress(path) == ShippedProgress()
    path.write_text(json.dumps({"batches": 3, "stdout_ns": 5, "stderr_ns": 7}))
    assert read_progress(path) == ShippedProgress(3, 5, 7)
    assert read_progress(path).since() == {"stdout": 5, "stderr": 7}
    path.write_text("{")
    assert read_progress(path) == ShippedProgress()


async def test_a_shipper_notes_its_progress_and_the_next_one_goes_on_from_it(tmp_path: Path) -> None:
    shipped: list[tuple[str, ev.LogBatch]] = []

    async def publish(batch: ev.LogBatch, msg_id: str) -> None:
        shipped.append((msg_id, batch))

    path = tmp_path / "logs-shipped.json"
    reader = asyncio.StreamReader()
    reader.feed_data(b"1970-01-01T00:00:01.5Z [rank=2] one\n1970-01-01T00:00:02Z two\n")
    reader.feed_eof()
    first = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a", progress_path=path)
    first.start()
    await first.follow(reader, "stdout", timestamped=True)
    await first.close()
    lines = [line for _, batch in shipped for line in batch.lines]
    assert [(x.log, x.rank, x.timestamp_ns) for x in lines] == [
        ("one", 2, 1_500_000_000),
        ("two", 0, 2 * 10**9),
    ]
    progress = read_progress(path)
    assert progress.stdout_ns == 2 * 10**9 and progress.stderr_ns == 0
    assert progress.batches == len(shipped)
    second = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a", progress_path=path)
    second.add("stderr", "three")
    await second.close()
    msg_ids = [msg_id for msg_id, _ in shipped]
    assert len(set(msg_ids)) == len(msg_ids)  # the next run's batches are not taken as repeats
    assert read_progress(path).stderr_ns > 0


async def test_the_batch_in_flight_is_noted_and_a_next_run_sends_it_again_under_its_id(
    tmp_path: Path,
) -> None:
    path = tmp_path / "logs-shipped.json"
    seen_in_flight: list[str] = []
    sent: list[tuple[str, list[str]]] = []

    async def publish(batch: ev.LogBatch, msg_id: str) -> None:
        seen_in_flight.append(read_progress(path).pending)
        sent.append((msg_id, [line.log for line in batch.lines]))

    first = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a", progress_path=path)
    first.add("stdout", "one", 5)
    await first.close()
    assert all(seen_in_flight) and read_progress(path).pending == ""  # noted before, cleared after
    # As if a kill -9 came between a publish and its acknowledgement:
    in_flight = ev.LogBatch(trial_id=1, allocation_id="1.1", agent_id="a", lines=[ev.LogLine(log="two")])
    pending = base64.b64encode(in_flight.SerializeToString()).decode()
    path.write_text(json.dumps({"batches": 7, "stdout_ns": 9, "stderr_ns": 0, "pending": pending}))
    sent.clear()
    second = LogShipper(publish, trial_id=1, allocation_id="1.1", agent_id="a", progress_path=path)
    second.add("stdout", "three", 10)
    await second.close()
    assert sent == [("logs-1.1-a-6", ["two"]), ("logs-1.1-a-7", ["three"])]
    assert read_progress(path) == ShippedProgress(8, 10, 0)
