"""Settings every service reads from its environment (prefix DET_).

Each service adds its own fields in a subclass with its own prefix; a missing
or malformed value stops the service at start-up with a message naming it.
"""

from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.logging import LOG_BACKUPS, LOG_MAX_BYTES


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DET_", extra="ignore")

    nats_url: str = "nats://127.0.0.1:4222"
    # Streams and subjects are named from it; tests use one per test.
    namespace: str = "det"
    log_json: bool = False
    log_level: str = "INFO"
    log_file: Path | None = None
    # log_file rotates past this size, keeping this many older files.
    log_max_bytes: Annotated[int, Field(ge=1024)] = LOG_MAX_BYTES
    log_backups: Annotated[int, Field(ge=0)] = LOG_BACKUPS
    # Shared by the gateway (verifies) and agents (mint) allocation tokens.
    cluster_secret: str = ""
    cluster_id: str = ""
    # Written once the service is ready (connected, caught up, listening).
    ready_file: Path | None = None
