"""structlog, configured once per process: readable in a terminal, JSON when
asked (DET_LOG_JSON=1), to a file under the cluster's data directory when the
service is started by `det deploy local`.

The file rotates by size: past DET_LOG_MAX_BYTES (20 MiB) it becomes
`<file>.1` (the older ones move up to `.DET_LOG_BACKUPS`, 3, and the oldest is
removed), so a service's logs take at most (backups + 1) × max bytes. Records
of the libraries below (nats-py, asyncio, gRPC) go through the same handler,
rendered the same way.
"""

import logging
import logging.handlers
import sys
from pathlib import Path

import structlog

LOG_MAX_BYTES = 20 * 1024 * 1024
LOG_BACKUPS = 3


_SHARED: list[structlog.typing.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def line_formatter(*, json: bool) -> logging.Formatter:
    """How a record (structlog's or a library's) becomes a line: JSON, or as a terminal shows it."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_SHARED,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )


def configure_logging(
    service: str,
    *,
    json: bool,
    log_file: Path | None,
    level: str = "INFO",
    max_bytes: int = LOG_MAX_BYTES,
    backups: int = LOG_BACKUPS,
) -> None:
    handler: logging.Handler
    if log_file is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            log_file, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
    handler.setFormatter(line_formatter(json=json))
    numeric_level = logging.getLevelName(level.upper())
    root = logging.getLogger()
    for old in root.handlers:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric_level)
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
