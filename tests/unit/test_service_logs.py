"""The services' own logs: det master logs' in-memory buffer of the gateway's
lines (services/gateway/features/logs/master.py) and det deploy local logs'
reading of a local cluster's files (determined/cli/_deploy_logs.py)."""

import logging
from pathlib import Path

import pytest

from determined.cli import _deploy_logs
from determined.cli.__main__ import main
from determined.proto import api_pb2
from services.gateway.features.logs import master


def buffer_with(count: int, max_lines: int = 5) -> master.MasterLogBuffer:
    buffer = master.MasterLogBuffer(max_lines)
    logger = logging.getLogger(f"test-master-logs-{count}-{max_lines}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(buffer)
    for n in range(count):
        logger.warning("line %d", n) if n % 2 else logger.info("line %d", n)
    logger.error("x" * (master.MAX_LINE_CHARS + 10))
    return buffer


async def read(buffer: master.MasterLogBuffer, tail: int = 0) -> list[api_pb2.MasterLogEntry]:
    request = api_pb2.MasterLogsRequest(tail=tail)
    return [entry async for response in master.master_logs(buffer, request) for entry in response.entries]


async def test_the_buffer_keeps_the_last_lines_numbered_with_their_level() -> None:
    entries = await read(buffer_with(6))
    assert [e.id for e in entries] == [3, 4, 5, 6, 7]
    assert [e.level for e in entries] == ["INFO", "WARNING", "INFO", "WARNING", "ERROR"]
    assert entries[0].message.endswith("line 2") and entries[0].timestamp_ns > 0
    assert (
        entries[-1].message.endswith(" more characters)")
        and len(entries[-1].message) < master.MAX_LINE_CHARS + 40
    )
    assert [e.id for e in await read(buffer_with(6), tail=2)] == [6, 7]
    assert [e.id for e in buffer_with(6).after(5)] == [6, 7]
    assert buffer_with(6).after(7) == []


def test_the_last_lines_of_a_file_are_read_from_its_end(tmp_path: Path) -> None:
    path = tmp_path / "gateway.log"
    path.write_text("".join(f"line {n} {'x' * 100}\n" for n in range(2000)))  # 3 blocks
    lines, end = _deploy_logs.last_lines(path, 3)
    assert [line.split()[1] for line in lines] == ["1997", "1998", "1999"]
    assert end == path.stat().st_size
    assert len(_deploy_logs.last_lines(path, 5000)[0]) == 2000


def test_following_a_file_gives_whole_new_lines_and_starts_over_after_a_rotation(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.log"
    path.write_text("a\nb\n")
    _, position = _deploy_logs.last_lines(path, 10)
    with path.open("a") as file:
        file.write("c\npartial")
    lines, position = _deploy_logs.new_lines(path, position)
    assert lines == ["c"]
    with path.open("a") as file:
        file.write(" line\n")
    assert _deploy_logs.new_lines(path, position)[0] == ["partial line"]
    path.write_text("new\n")  # rotated: a smaller file under the name
    assert _deploy_logs.new_lines(path, position + 100) == (["new"], 4)
    path.unlink()
    assert _deploy_logs.new_lines(path, 4) == ([], 0)


def test_det_deploy_local_logs_leads_each_line_with_its_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "gateway.log").write_text("g1\ng2\n")
    (logs / "gateway.log.1").write_text("rotated\n")
    (logs / "agent-1.out").write_text("a1\n")
    assert _deploy_logs.log_files(logs, ["gateway"]) == [logs / "gateway.log"]
    assert main(["deploy", "local", "logs", "--data-dir", str(tmp_path), "--tail", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["agent-1.out | a1", "gateway.log | g2"]
    assert main(["deploy", "local", "logs", "--data-dir", str(tmp_path), "scheduler"]) == 1
    assert "no logs of scheduler" in capsys.readouterr().err
