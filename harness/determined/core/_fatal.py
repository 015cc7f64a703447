"""Failures a restart cannot fix: the trial tells its agent why before it exits, so that
it fails once, saying why, instead of failing again up to `max_restarts` times.

The agent names a file in DET_FATAL_ERROR_FILE (made by the agent in the allocation's
folder, writable by the trial); what a process that exits non-zero wrote there becomes
the reason of its run and of the trial's end (docs/CONTRACTS.md, "Trial processes").
"""

import logging
import os
from pathlib import Path

logger = logging.getLogger("determined.core")

FATAL_ERROR_FILE_VARIABLE = "DET_FATAL_ERROR_FILE"


def report_fatal(reason: str) -> None:
    """Log `reason` and, on a cluster, leave it for the agent: the trial will not be
    restarted once this process exits non-zero."""
    logger.error("%s; the trial fails without restarts (a restart would fail the same way)", reason)
    path = os.environ.get(FATAL_ERROR_FILE_VARIABLE)
    if not path:
        return
    try:
        Path(path).write_text(reason)
    except OSError as error:
        logger.warning("could not tell the agent that a restart cannot help: %s", error)
