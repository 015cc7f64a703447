"""The user and session RPCs (det user ...): the functions the gRPC servicer and the
HTTP routes call, over the pure rules (accounts.py) and the in-memory
directory (directory.py).

Login is the one RPC here answered without a token. Repeated failures for a
username or from a client address are slowed down (login_limits.py) and
logged (`login_failed`, with the username and address, never the password);
a failure for a user who exists is also appended as UserLoginFailed (actor
"address:<client>"), at most one per user, address and minute.
A password arrives as
Determined's salted SHA-512 hex (is_hashed) or as typed (hashed here the same
way); bcrypt runs off the event loop. A change this gateway appends is in
its directory before the RPC answers: a token a Logout ended is refused by
the very next call.
"""

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable

import structlog

from determined.common.passwords import salted_hash
from determined.proto import api_pb2
from services.common.envelope import Append, aggregate
from services.common.eventlog import ConflictError
from services.common.tokens import mint_session_token
from services.gateway.auth import UserPrincipal, current_principal, require_admin, require_user
from services.gateway.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    NotFoundError,
    ReadModelsUnavailableError,
    UnauthenticatedError,
)
from services.gateway.features.commands import Unchanged
from services.gateway.features.parts import DECIDE_ATTEMPTS, FeatureService, Parts
from services.gateway.features.users import accounts as users
from services.gateway.features.users.login_limits import LoginThrottle

INVALID_CREDENTIALS = "invalid credentials"

log = structlog.get_logger()


class Users(FeatureService):
    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.login_throttle = LoginThrottle(time.monotonic)

    async def login(self, request: api_pb2.LoginRequest, *, address: str) -> api_pb2.LoginResponse:
        """Login from the client at `address` (gRPC's and HTTP's): refused at
        once (RESOURCE_EXHAUSTED, saying how long to wait) while the username
        or the address has failed too often."""
        self.login_throttle.begin(request.username, address)
        salted = _salted(request.password, request.is_hashed)
        directory = self.user_directory.current
        user = directory.by_name(request.username)
        if user is None and await self.user_directory.catch_up():
            user = directory.by_name(request.username)
        if user is None:
            await asyncio.to_thread(users.check_a_stand_in_password, salted)
        if user is None or not await asyncio.to_thread(users.password_matches, user.password_hash, salted):
            failures = self.login_throttle.failures(request.username, address)
            log.warning("login_failed", username=request.username, address=address, failures=failures)
            if user is not None:
                await self._login_failed(user, address, "wrong password")
            raise UnauthenticatedError(INVALID_CREDENTIALS)
        self.login_throttle.succeeded(request.username, address)
        if not user.active:
            await self._login_failed(user, address, "user is inactive")
            raise UnauthenticatedError(f"user {user.username} is not active")
        session_id = uuid.uuid4().hex
        expires_at_ns = time.time_ns() + int(self.settings.session_ttl_s * 1e9)
        sequence, _ = await self.store.append(
            users.session_started(user.user_id, session_id, expires_at_ns), actor=f"user:{user.username}"
        )
        await self.user_directory.wait_for(sequence)
        log.info("logged_in", username=user.username, session_id=session_id)
        token = mint_session_token(self.settings.cluster_secret, user.user_id, session_id, expires_at_ns)
        return api_pb2.LoginResponse(token=token, user=user_message(user), expires_at_ns=expires_at_ns)

    async def _login_failed(self, user: users.User, address: str, reason: str) -> None:
        """Records a failed login to an existing user (at most one per user,
        address and minute: its message id); a name no user has is only logged."""
        append, actor = users.login_failed(user, address, reason, time.time_ns())
        await self.store.append(append, actor=actor)

    async def logout(self, request: api_pb2.LogoutRequest) -> api_pb2.LogoutResponse:
        """Ends the session of the call's token (an anonymous call has none: nothing to end)."""
        principal = require_user()
        if principal.session_id:
            append = users.session_revoked(principal.user_id, principal.session_id)
            sequence, _ = await self.store.append(append, actor=principal.actor)
            await self.user_directory.wait_for(sequence)
            log.info("logged_out", username=principal.username, session_id=principal.session_id)
        return api_pb2.LogoutResponse()

    async def get_me(self, request: api_pb2.GetMeRequest) -> api_pb2.GetMeResponse:
        return api_pb2.GetMeResponse(user=user_message(self._caller()))

    async def get_users(self, request: api_pb2.GetUsersRequest) -> api_pb2.GetUsersResponse:
        """From the read models (the active ones unless include_inactive), by id."""
        require_user()
        return api_pb2.GetUsersResponse(users=await self.queries.users.users(request.include_inactive))

    async def create_user(self, request: api_pb2.CreateUserRequest) -> api_pb2.CreateUserResponse:
        principal = require_admin("creating a user")
        username = users.checked_username(request.username)
        password_hash = await asyncio.to_thread(
            users.hash_password, _salted(request.password, request.is_hashed)
        )
        directory = self.user_directory.current
        user_id = 0
        for _ in range(DECIDE_ATTEMPTS):
            await self.user_directory.catch_up()
            if directory.by_name(username) is not None:
                raise AlreadyExistsError(f"user {username} exists already")
            # Past an id whose subject is taken (also by a creation the directory skipped: a name taken twice).
            user_id = max(directory.next_user_id(), user_id + 1)
            append = users.user_created(
                user_id,
                username,
                display_name=request.display_name,
                admin=request.admin,
                password_hash=password_hash,
                created_by=principal.actor,
            )
            try:
                sequence, _ = await self.store.append(append, actor=principal.actor)
            except ConflictError:
                continue  # another gateway took this id a moment ago
            await self._folded(sequence)
            created = directory.by_name(username)
            if created is None or created.user_id != user_id:  # the name was taken a moment ago
                raise AlreadyExistsError(f"user {username} was created a moment ago by another request")
            log.info("user_created", username=username, user_id=user_id, admin=request.admin)
            return api_pb2.CreateUserResponse(user=user_message(created))
        raise FailedPreconditionError("could not find a free user id; try again")

    async def update_user(self, request: api_pb2.UpdateUserRequest) -> api_pb2.UpdateUserResponse:
        def decide(actor: users.User, target: users.User) -> Append | Unchanged:
            return users.user_updated(
                self.user_directory.current,
                actor,
                target,
                new_username=request.new_username if request.HasField("new_username") else None,
                display_name=request.display_name if request.HasField("display_name") else None,
                admin=request.admin if request.HasField("admin") else None,
                active=request.active if request.HasField("active") else None,
            )

        target, unchanged = await self._decide(request.username, decide)
        return api_pb2.UpdateUserResponse(user=user_message(target), unchanged_reason=unchanged)

    async def set_user_password(
        self, request: api_pb2.SetUserPasswordRequest
    ) -> api_pb2.SetUserPasswordResponse:
        """Every session of the user started before ends (also the caller's own)."""
        password_hash = await asyncio.to_thread(
            users.hash_password, _salted(request.password, request.is_hashed)
        )

        def decide(actor: users.User, target: users.User) -> Append:
            return users.password_changed(actor, target, password_hash)

        target, _ = await self._decide(request.username or self._caller().username, decide)
        log.info("password_changed", username=target.username)
        return api_pb2.SetUserPasswordResponse()

    async def _decide(
        self, username: str, decide: Callable[[users.User, users.User], Append | Unchanged]
    ) -> tuple[users.User, str]:
        """Appends what `decide` makes of (caller, target), against the
        target's version (made again when the user changed meanwhile);
        returns the target as it is then, and why nothing changed ("" if it did)."""
        for _ in range(DECIDE_ATTEMPTS):
            target = await self._user(username)
            stored = await self.store.last_event(aggregate("user", target.user_id))
            await self.user_directory.wait_for(stored.sequence if stored is not None else 0)
            target = await self._user(username)
            decision = decide(self._caller(), target)
            if isinstance(decision, Unchanged):
                return target, decision.reason
            try:
                sequence, _ = await self.store.append(decision, actor=current_principal().actor)
            except ConflictError:
                continue
            await self._folded(sequence)
            return self.user_directory.current.users[target.user_id], ""
        raise FailedPreconditionError(f"user {username} changed meanwhile; try again")

    async def _user(self, username: str) -> users.User:
        user = self.user_directory.current.by_name(username)
        if user is None and await self.user_directory.catch_up():
            user = self.user_directory.current.by_name(username)
        if user is None:
            raise NotFoundError(f"user {username} not found; det user list --all shows the users")
        return user

    def _caller(self) -> users.User:
        principal: UserPrincipal = require_user()
        user = self.user_directory.current.users.get(principal.user_id)
        if user is None:
            raise UnauthenticatedError(f"user {principal.username} is unknown")
        return user

    async def _folded(self, sequence: int) -> None:
        """Waits until the directory (at once) and the read models (GetUsers) hold `sequence`."""
        await self.user_directory.wait_for(sequence)
        with contextlib.suppress(ReadModelsUnavailableError):  # GetUsers answers once PostgreSQL is back
            await self.projector.wait_for(sequence)


def user_message(user: users.User) -> api_pb2.User:
    return api_pb2.User(
        id=user.user_id,
        username=user.username,
        display_name=user.display_name,
        admin=user.admin,
        active=user.active,
        created_at_ns=user.created_at_ns,
    )


def _salted(password: str, is_hashed: bool) -> str:
    return users.checked_salted_password(password if is_hashed else salted_hash(password))
