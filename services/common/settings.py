"""Settings every service reads from its environment (prefix DET_).

Each service adds its own fields in a subclass with its own prefix; a missing
or malformed value stops the service at start-up with a message naming it.
"""

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr
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


class MasterCertificate(BaseSettings):
    """How a process checks the cluster's TLS certificate (Determined's DET_MASTER_CERT_FILE
    and DET_MASTER_CERT_NAME): the master's, which nats-server's client port serves too when
    agents on other machines connect (cluster-up --tls-cert). Unset: the system's CAs, and
    the name of the host dialed."""

    model_config = SettingsConfigDict(env_prefix="DET_MASTER_CERT_", extra="ignore")

    file: str = ""
    name: str = ""


class NatsCredentials(BaseSettings):
    """The nats-server user a process connects as (DET_NATS_USER, DET_NATS_PASSWORD): a
    local cluster gives each part its own (deploy/local/credentials.py). Unset: none, as
    the tests' bare nats-server wants. Read by services/common/connection.py for every
    connection, so no service passes it along."""

    model_config = SettingsConfigDict(env_prefix="DET_NATS_", extra="ignore")

    user: str = ""
    password: SecretStr = SecretStr("")


def inbox_prefix(user: str) -> str:
    """The prefix of the inboxes of a process that logs in as `user` (its answers arrive
    there): one subject token per user, the only inboxes its permissions let it read
    (deploy/local/credentials.py). A '.' of the name (an agent id may hold one) is '~',
    which no user name holds."""
    return f"_INBOX.{user.replace('.', '~')}"
