"""`python -m services.gateway`: the public API and the read-model projector.

Settings come from the environment (services/gateway/settings.py). The ready
file is written once the gateway listens and its read models have caught up
with the log. SIGTERM (or SIGINT) stops it with a grace period; a failed
projector stops it with a non-zero status so that its supervisor restarts it.
"""

import asyncio
import signal
import sys

import structlog
from pydantic import ValidationError

from services.common.logging import configure_logging
from services.gateway.errors import ReadModelsUnavailableError
from services.gateway.features.users.directory import InitialPasswordError
from services.gateway.server import Gateway, PortInUseError
from services.gateway.settings import GatewaySettings

log = structlog.get_logger()


def main() -> int:
    try:
        settings = GatewaySettings()  # type: ignore[call-arg]  # read from the environment
    except ValidationError as error:
        print(f"gateway: invalid settings (environment DET_*):\n{error}", file=sys.stderr)
        return 2
    configure_logging(
        "gateway",
        json=settings.log_json,
        log_file=settings.log_file,
        level=settings.log_level,
        max_bytes=settings.log_max_bytes,
        backups=settings.log_backups,
    )
    return asyncio.run(serve(settings))


async def serve(settings: GatewaySettings) -> int:
    try:
        gateway = await Gateway.start(settings)
    except PortInUseError as error:
        log.error("port_in_use", port=settings.gateway_port, error=str(error))
        print(f"gateway: {error}", file=sys.stderr)
        return 1
    except InitialPasswordError as error:
        log.error("no_initial_password", error=str(error))
        print(f"gateway: {error}", file=sys.stderr)
        return 2
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    ready = asyncio.create_task(_write_ready_file(gateway))
    stop_wait = asyncio.create_task(stopping.wait())
    await asyncio.wait([stop_wait, gateway.projector_task], return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    stop_wait.cancel()
    failed = not stopping.is_set()
    await gateway.stop()
    return 1 if failed else 0


async def _write_ready_file(gateway: Gateway) -> None:
    while True:
        try:
            if await gateway.projector.catch_up(timeout_s=60.0):
                break
        except ReadModelsUnavailableError:
            await gateway.projector.wait_available()
        log.info("catching_up", position=gateway.projector.position)
    if gateway.settings.ready_file is not None:
        gateway.settings.ready_file.parent.mkdir(parents=True, exist_ok=True)
        gateway.settings.ready_file.write_text(f"{gateway.port}\n")
    log.info("gateway_ready", port=gateway.port, position=gateway.projector.position)


if __name__ == "__main__":
    sys.exit(main())
