"""Service logs: rotated by size, so a service's log folder is bounded."""

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from services.common.logging import configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
        handler.close()
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_the_log_file_rotates_and_stays_bounded(tmp_path: Path, restore_logging: None) -> None:
    log_file = tmp_path / "logs" / "searcher.log"
    configure_logging("searcher", json=True, log_file=log_file, max_bytes=4096, backups=2)
    log = structlog.get_logger()
    for index in range(500):
        log.info("decided", index=index)
    logging.getLogger("nats.aio.client").error("a library's record")
    files = sorted(path.name for path in log_file.parent.iterdir())
    assert files == ["searcher.log", "searcher.log.1", "searcher.log.2"]
    assert all(path.stat().st_size <= 4096 for path in log_file.parent.iterdir())
    newest = log_file.read_text().splitlines()
    assert '"index": 499' in newest[-2] and '"service": "searcher"' in newest[-2]
    assert '"event": "a library\'s record"' in newest[-1] and '"level": "error"' in newest[-1]
