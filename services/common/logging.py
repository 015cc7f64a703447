"""structlog, configured once per process: readable in a terminal, JSON when
asked (DET_LOG_JSON=1), to a file under the cluster's data directory when the
service is started by `det deploy local`."""

import logging
import sys
from pathlib import Path
from typing import TextIO

import structlog


def configure_logging(service: str, *, json: bool, log_file: Path | None, level: str = "INFO") -> None:
    stream: TextIO = sys.stderr
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        stream = open(log_file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives with the process
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
