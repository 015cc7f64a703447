"""`python -m determined.exec.tensorboard`: a TensorBoard task.

Copies the TensorBoard files of the trials in DET_TENSORBOARD_SOURCES_FILE from their checkpoint
storage into `tensorboard/` of the working directory, starts TensorBoard on it (listening on
DET_TASK_HOST:DET_TASK_PORT, served under DET_PROXY_PREFIX, which the gateway forwards
unchanged), and copies what is new every REFRESH_S seconds while it runs. Each trial is a run
named `experiment/<id>/trial/<id>` (its folder, as in Determined, whose runs are named by the
trials' storage paths). Ends with TensorBoard's exit code; SIGTERM and SIGINT stop TensorBoard.
"""

import importlib.util
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
from collections.abc import Mapping
from types import FrameType

import determined as det
from determined.tensorboard import Fetcher, read_sources

logger = logging.getLogger("determined.exec.tensorboard")

REFRESH_S = 5.0
# TensorBoard reads the copies again this often (seconds).
RELOAD_S = 5
FOLDER = "tensorboard"


def tensorboard_command(logdir: pathlib.Path, env: Mapping[str, str], extra_args: list[str]) -> list[str]:
    """TensorBoard's command line for the task's environment, then the config's
    `tensorboard_args` (checked when the task was launched); ValueError naming a variable that
    is missing or wrong."""
    host, port, prefix = (
        env.get(name, "") for name in ("DET_TASK_HOST", "DET_TASK_PORT", "DET_PROXY_PREFIX")
    )
    if not host or not prefix.startswith("/"):
        raise ValueError("DET_TASK_HOST and DET_PROXY_PREFIX (a path) must be set: the agent sets them")
    if not port.isdecimal() or not 0 < int(port) < 65536:
        raise ValueError(f"DET_TASK_PORT must be a port number, got {port!r}")
    return [
        sys.executable,
        "-m",
        "tensorboard.main",
        f"--logdir={logdir}",
        f"--host={host}",
        f"--port={port}",
        f"--path_prefix={prefix.rstrip('/')}",
        # The Python loader (TensorBoard's Rust one is a separate, optional binary).
        "--load_fast=false",
        f"--reload_interval={RELOAD_S}",
        *extra_args,
    ]


def config_tensorboard_args(env: Mapping[str, str]) -> list[str]:
    """The `tensorboard_args` of the task's config (DET_TASK_CONFIG_FILE; none without it)."""
    config_file = env.get("DET_TASK_CONFIG_FILE")
    if not config_file:
        return []
    args = json.loads(pathlib.Path(config_file).read_text()).get("tensorboard_args") or []
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ValueError("tensorboard_args in the task's config must be a list of strings")
    return args


def main() -> int:
    logging.basicConfig(level=logging.INFO, format=det.LOG_FORMAT)
    logdir = pathlib.Path.cwd() / FOLDER
    try:
        command = tensorboard_command(logdir, os.environ, config_tensorboard_args(os.environ))
        sources_file = os.environ.get("DET_TENSORBOARD_SOURCES_FILE")
        if not sources_file:
            raise ValueError("DET_TENSORBOARD_SOURCES_FILE must be set: the agent sets it")
        sources = read_sources(pathlib.Path(sources_file))
    except (OSError, ValueError) as error:
        logger.error("cannot start the TensorBoard: %s", error)
        return 1
    if importlib.util.find_spec("tensorboard") is None:
        logger.error("%s has no tensorboard package: pip install 'determined-es[tasks]'", sys.executable)
        return 1
    fetcher = Fetcher(sources, logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    logger.info("copying the TensorBoard files of %d trials", len(sources))
    logger.info("%d files copied; starting TensorBoard", fetcher.refresh())
    process = subprocess.Popen(command)
    _forward_stop_signals(process)
    while True:
        try:
            code = process.wait(REFRESH_S)
        except subprocess.TimeoutExpired:
            fetcher.refresh()
            continue
        return code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a shell says


def _forward_stop_signals(process: "subprocess.Popen[bytes]") -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        process.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


if __name__ == "__main__":
    sys.exit(main())
