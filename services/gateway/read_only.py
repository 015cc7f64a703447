"""The gateway of a replay (`det deploy local replay`, deploy/local/replay_home.py): it serves
someone else's cluster history from a log loaded from a bundle, and changes nothing.

- Its event store (ReplayStore) refuses every append, every value beside the log and every
  context upload with FAILED_PRECONDITION "this cluster replays <bundle>: it changes nothing".
  Every feature changes state through the store, so no RPC or route, present or future, appends,
  and the refusal reaches the gRPC and HTTP edges alike. No built-in user is made at start.
- Only the replay's user logs in (DET_REPLAY_USER, an admin: it reads every event), with the
  one-time password `det deploy local replay` shows (DET_REPLAY_PASSWORD). It lives in the
  gateway's directory in memory only, never in the log, and so do its sessions: a restarted
  gateway forgets them (log in again). The bundle's own users cannot log in: their password
  hashes are redacted.
"""

import asyncio
import time
import uuid
from collections.abc import AsyncIterable
from dataclasses import replace

from determined.common.passwords import salted_hash
from determined.proto import api_pb2
from services.common.connection import Connection
from services.common.contexts import Contexts
from services.common.envelope import Append, Envelope
from services.common.eventstore import EventStore
from services.common.tokens import mint_session_token
from services.gateway.auth import require_user
from services.gateway.errors import FailedPreconditionError, UnauthenticatedError
from services.gateway.features.users import accounts
from services.gateway.features.users.service import INVALID_CREDENTIALS, Users, _salted, user_message
from services.gateway.settings import GatewaySettings

# The replay's user's id: one no user of a log has (they start at 1).
OPERATOR_ID = 0


class ReadOnlyError(FailedPreconditionError):
    """A change asked of a replay."""


def refusal(bundle: str) -> str:
    return f"this cluster replays {bundle}: it changes nothing"


class ReplayStore(EventStore):
    """An event store that reads and refuses every change (ReadOnlyError)."""

    def __init__(
        self, connection: Connection, namespace: str = "det", appends: frozenset[str] | None = None
    ) -> None:
        super().__init__(connection, namespace, appends)
        # The bundle the log was loaded from (the gateway's DET_REPLAY_OF), for the refusal.
        self.replay_of = ""
        self.contexts = _ReplayContexts(self)

    def refused(self) -> ReadOnlyError:
        return ReadOnlyError(refusal(self.replay_of))

    async def append(self, append: Append, *, actor: str) -> tuple[int, Envelope]:
        raise self.refused()

    async def put_value(self, bucket: str, key: str, value: bytes) -> None:
        raise self.refused()


class _ReplayContexts(Contexts):
    def __init__(self, store: ReplayStore) -> None:
        super().__init__(store.connection, store.namespace)
        self.store = store

    async def put_chunks(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        raise self.store.refused()


def admit_operator(directory: accounts.Directory, settings: GatewaySettings) -> None:
    """Puts the replay's user (an admin, with the replay's password) in the directory's memory;
    a user of the bundle with the same name is not reachable by name any more."""
    password_hash = accounts.hash_password(salted_hash(settings.replay_password.get_secret_value()))
    operator = accounts.User(
        OPERATOR_ID,
        settings.replay_user,
        display_name=f"replay of {settings.replay_of}",
        admin=True,
        active=True,
        password_hash=password_hash,
        created_at_ns=time.time_ns(),
        sessions_valid_from=0,
        version=0,
    )
    directory.users[OPERATOR_ID] = operator
    directory.ids_by_name[operator.username] = OPERATOR_ID


class ReplayUsers(Users):
    """Logging in and out of a replay: the replay's user only, its sessions in memory."""

    async def login(self, request: api_pb2.LoginRequest, *, address: str) -> api_pb2.LoginResponse:
        self.login_throttle.begin(request.username, address)
        directory = self.user_directory.current
        operator = directory.users.get(OPERATOR_ID)
        if operator is None or request.username != operator.username:
            raise UnauthenticatedError(
                f"{refusal(self.settings.replay_of)}: its users cannot log in (their password hashes are "
                f"not in it); log in as {self.settings.replay_user} with the password det deploy local "
                "replay showed"
            )
        salted = _salted(request.password, request.is_hashed)
        if not await asyncio.to_thread(accounts.password_matches, operator.password_hash, salted):
            self.login_throttle.failures(request.username, address)
            raise UnauthenticatedError(INVALID_CREDENTIALS)
        self.login_throttle.succeeded(request.username, address)
        session = accounts.Session(
            OPERATOR_ID, uuid.uuid4().hex, time.time_ns() + int(self.settings.session_ttl_s * 1e9), 0
        )
        directory.sessions[session.session_id] = session
        token = mint_session_token(
            self.settings.cluster_secret, OPERATOR_ID, session.session_id, session.expires_at_ns
        )
        return api_pb2.LoginResponse(
            token=token, user=user_message(operator), expires_at_ns=session.expires_at_ns
        )

    async def logout(self, request: api_pb2.LogoutRequest) -> api_pb2.LogoutResponse:
        principal = require_user()
        sessions = self.user_directory.current.sessions
        if (session := sessions.get(principal.session_id)) is not None:
            sessions[principal.session_id] = replace(session, revoked=True)
        return api_pb2.LogoutResponse()
