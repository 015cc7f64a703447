"""The gateway's settings (environment, prefix DET_), validated at start-up."""

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr, field_validator, model_validator

from determined.common.expconf import CheckpointStorage
from services.common.eventstore import LOGS_MAX_BYTES
from services.common.settings import CommonSettings


class GatewaySettings(CommonSettings):
    # asyncpg-style: postgresql://user@host:port/db
    database_url: str
    gateway_port: int = Field(8080, ge=0, le=65535)
    gateway_host: str = "0.0.0.0"
    # The HTTP/JSON API's port, on gateway_host (cluster-up: the gRPC port + 1; 0: any free
    # port); unset: no HTTP API.
    http_port: int | None = Field(None, ge=0, le=65535)
    # The port tasks' pages (/proxy/<task id>/: notebooks, TensorBoards) are served on: an
    # origin apart from the web UI's (http/task_origin.py; cluster-up: the gRPC port + 2; 0: any
    # free port). Unset: they are served on http_port, in the web UI's origin.
    proxy_port: int | None = Field(None, ge=0, le=65535)
    # The default `shared_fs` host_path of experiments' checkpoint storage.
    checkpoint_path: str = "/tmp/determined-checkpoints"
    # The cluster's default checkpoint storage, a JSON `checkpoint_storage` section (cluster-up
    # --checkpoint-storage); an experiment's own section overrides it. Unset: shared_fs.
    checkpoint_storage: CheckpointStorage | None = None
    cluster_name: str = "determined-es"
    # How long in-flight RPCs get to finish on SIGTERM.
    grace_period_s: float = 5.0
    # The most the LOGS stream holds (the oldest trial logs are discarded past it).
    logs_max_bytes: Annotated[int, Field(ge=1024 * 1024)] = LOGS_MAX_BYTES
    # A local cluster's supervisor's record of every part (GetMaster's `parts`); unset: none.
    status_file: Path | None = None
    # Where an agent on another machine reaches nats-server (GetMaster.nats_url);
    # "": nats_url (a local cluster's own address).
    advertised_nats_url: str = ""
    # Users: a call without a token acts as `determined` (tests that build a gateway
    # directly only; a cluster never sets it).
    allow_anonymous: bool = False
    # Applied to `admin` and `determined` when the first gateway finds no user (plain
    # text; never logged); blank is refused then unless allow_blank_password.
    initial_user_password: str = Field("", repr=False)
    allow_blank_password: bool = False
    # A detached run's (core_v2) trial ends ERROR when its script sent no heartbeat for this long.
    unmanaged_timeout_s: float = Field(300.0, gt=0)
    # How long a login's session (its token) lasts.
    session_ttl_s: float = Field(7 * 24 * 3600.0, gt=0)
    # PEM files of the certificate (its chain) and private key the gRPC and HTTP ports serve
    # TLS with (cluster-up --tls-cert/--tls-key); both unset: plaintext.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Set: this gateway replays the bundle of that name and changes nothing (read_only.py); only
    # replay_user logs in, with replay_password (det deploy local replay, deploy/local/replay_home.py).
    replay_of: str = ""
    replay_user: str = ""
    replay_password: SecretStr = SecretStr("")

    @field_validator("checkpoint_storage")
    @classmethod
    def _storage_has_a_type(cls, storage: CheckpointStorage | None) -> CheckpointStorage | None:
        if storage is not None and storage.type is None:
            raise ValueError("the cluster's default checkpoint storage needs a type")
        return storage

    @model_validator(mode="after")
    def _tls_files_together(self) -> "GatewaySettings":
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("DET_TLS_CERT_FILE and DET_TLS_KEY_FILE go together: set both or neither")
        return self

    @model_validator(mode="after")
    def _proxy_port_beside_http(self) -> "GatewaySettings":
        if self.proxy_port is None:
            return self
        if self.http_port is None:
            raise ValueError("DET_PROXY_PORT needs DET_HTTP_PORT: tasks' pages are part of the HTTP API")
        if self.proxy_port == self.http_port != 0:
            raise ValueError(
                f"DET_PROXY_PORT and DET_HTTP_PORT are both {self.http_port}: tasks' pages need a port"
                " of their own (another origin than the web UI's)"
            )
        return self

    @model_validator(mode="after")
    def _replay_has_a_login(self) -> "GatewaySettings":
        if self.replay_of and not (self.replay_user and self.replay_password.get_secret_value()):
            raise ValueError(
                "DET_REPLAY_OF needs DET_REPLAY_USER and DET_REPLAY_PASSWORD: who logs in to the replay"
            )
        return self

    def tls_files(self) -> tuple[Path, Path] | None:
        """The (certificate, private key) files to serve TLS with; None: plaintext."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        return self.tls_cert_file, self.tls_key_file
