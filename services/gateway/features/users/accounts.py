"""Users and sessions: the pure rules (no I/O, no clock but the `now_ns` a
caller passes).

The directory is the fold of the `user/<id>` events: every user (with its
password's hash, which never leaves this module's callers but as an event)
and every session. The gateway keeps one in memory, so that checking a
session token costs a few dictionary lookups. Stream sequences order a
session against its user's changes: a session started before the newest
password change or deactivation is over.

Passwords: a client sends Determined's salted SHA-512 hex of the password
(determined.common.passwords); the directory keeps bcrypt of that hex, as
Determined's master does (truncated to bcrypt's 72 bytes). "" is no password,
which only an empty password matches.

Permissions (Determined's basic mode): user administration (create, rename,
activate or deactivate, the admin flag) is an admin's; a display name or a
password is its user's own or an admin's.
"""

import functools
import re
from dataclasses import dataclass, field, replace

import bcrypt

from determined.proto import events_pb2
from services.common.envelope import Append, Envelope, aggregate
from services.gateway.errors import InvalidArgumentError, PermissionDeniedError
from services.gateway.features.commands import Unchanged

ADMIN = "admin"
DEFAULT_USER = "determined"
# The built-in users, created by the first gateway that finds none, in this order (ids 1, 2).
BUILT_IN_USERS = ((1, ADMIN, True), (2, DEFAULT_USER, False))
# Determined's bcrypt cost (Go's bcrypt.DefaultCost): about 50 ms a hash.
BCRYPT_ROUNDS = 10
BCRYPT_MAX_BYTES = 72
LOGIN_HINT = "run `det user login` first"
# A client address as a failed login records it (an IPv6 address is at most 45).
MAX_ADDRESS_CHARS = 64
_USERNAME = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
_SALTED_HASH = re.compile(r"[0-9a-f]{128}")


class SessionRefusedError(Exception):
    """Why a well-signed session token is not good (any more)."""


class UnknownSessionError(SessionRefusedError):
    """A session the directory has not seen (yet: it may be a moment behind the log)."""


@dataclass(frozen=True)
class User:
    user_id: int
    username: str
    display_name: str
    admin: bool
    active: bool
    password_hash: str
    created_at_ns: int
    # Sessions started before this stream sequence are over: its newest password,
    # or its newest deactivation (its creation at first).
    sessions_valid_from: int
    # Its aggregate's version: the sequence of its newest event.
    version: int


@dataclass(frozen=True)
class Session:
    user_id: int
    session_id: str
    expires_at_ns: int
    started_at: int
    revoked: bool = False


@dataclass
class Directory:
    """Every user and session, as the log says up to `position`."""

    position: int = 0
    users: dict[int, User] = field(default_factory=dict)
    ids_by_name: dict[str, int] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)

    def apply(self, sequence: int, envelope: Envelope) -> None:
        """Folds one stored `user/<id>` event (one at or below the position is
        skipped: folding the log twice gives the same directory)."""
        if sequence <= self.position:
            return
        self.position = sequence
        kind = envelope.WhichOneof("payload")
        if kind == "user_created":
            self._created(envelope.user_created, sequence, envelope.occurred_at_ns)
        elif kind == "user_updated":
            self._updated(envelope.user_updated, sequence)
        elif kind == "user_password_changed":
            changed = envelope.user_password_changed
            self._change(
                changed.user_id, sequence, password_hash=changed.password_hash, sessions_valid_from=sequence
            )
        elif kind == "user_session_started":
            started = envelope.user_session_started
            session = Session(started.user_id, started.session_id, started.expires_at_ns, sequence)
            self.sessions.setdefault(started.session_id, session)
            self._change(started.user_id, sequence)
        elif kind == "user_session_revoked":
            revoked = envelope.user_session_revoked
            if (known := self.sessions.get(revoked.session_id)) is not None:
                self.sessions[revoked.session_id] = replace(known, revoked=True)
            self._change(revoked.user_id, sequence)
        elif kind == "user_login_failed":  # changes nothing but the version decisions are made against
            self._change(envelope.user_login_failed.user_id, sequence)

    def _created(self, created: events_pb2.UserCreated, sequence: int, at: int) -> None:
        if created.user_id in self.users or created.username in self.ids_by_name:
            return  # a name and an id are taken once: the first creation stays
        self.users[created.user_id] = User(
            created.user_id,
            created.username,
            created.display_name,
            created.admin,
            created.active,
            created.password_hash,
            at,
            sequence,
            sequence,
        )
        self.ids_by_name[created.username] = created.user_id

    def _updated(self, updated: events_pb2.UserUpdated, sequence: int) -> None:
        user = self.users.get(updated.user_id)
        if user is None:
            return
        changes: dict[str, object] = {}
        if updated.HasField("username") and updated.username not in self.ids_by_name:
            del self.ids_by_name[user.username]
            self.ids_by_name[updated.username] = user.user_id
            changes["username"] = updated.username
        for name in ("display_name", "admin", "active"):
            if updated.HasField(name):
                changes[name] = getattr(updated, name)
        if updated.HasField("active") and not updated.active:
            changes["sessions_valid_from"] = sequence  # reactivated, it logs in again
        self._change(user.user_id, sequence, **changes)

    def _change(self, user_id: int, sequence: int, **changes: object) -> None:
        if (user := self.users.get(user_id)) is not None:
            self.users[user_id] = replace(user, version=sequence, **changes)  # type: ignore[arg-type]

    def by_name(self, username: str) -> User | None:
        user_id = self.ids_by_name.get(username)
        return None if user_id is None else self.users[user_id]

    def session_user(self, user_id: int, session_id: str, expires_at_ns: int, now_ns: int) -> User:
        """The user of a session whose token verified; SessionRefusedError
        when the session is over, unknown, or its user may not act."""
        if expires_at_ns <= now_ns:
            raise SessionRefusedError("the session has expired")
        session = self.sessions.get(session_id)
        if session is None or session.user_id != user_id:
            raise UnknownSessionError("the session is unknown")
        if session.revoked:
            raise SessionRefusedError("the session was ended (det user logout)")
        user = self.users.get(user_id)
        if user is None or not user.active:
            raise SessionRefusedError("the user is not active")
        if session.started_at < user.sessions_valid_from:
            raise SessionRefusedError("the password was changed or the user deactivated since the login")
        return user

    def forget_expired(self, now_ns: int) -> None:
        """Drops the sessions past their expiry (a token of one is refused by its own expiry)."""
        self.sessions = {key: s for key, s in self.sessions.items() if s.expires_at_ns > now_ns}

    def next_user_id(self) -> int:
        return max(self.users, default=0) + 1


# -- passwords --------------------------------------------------------------------------


def hash_password(salted: str) -> str:
    """What the directory keeps of a password sent as its salted SHA-512 hex."""
    if not salted:
        return ""
    return bcrypt.hashpw(_bcrypt_input(salted), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()


def password_matches(stored_hash: str, salted: str) -> bool:
    if not stored_hash or not salted:
        return stored_hash == salted
    return bcrypt.checkpw(_bcrypt_input(salted), stored_hash.encode())


def check_a_stand_in_password(salted: str) -> None:
    """Takes as long as checking a user's password: a login naming no user
    answers as late as one with a wrong password, so that its answer time
    does not tell which usernames exist."""
    password_matches(_stand_in_hash(), salted or "0" * 128)


@functools.cache
def _stand_in_hash() -> str:
    return hash_password("f" * 128)


def checked_salted_password(salted: str) -> str:
    """A password as the client sends it (is_hashed): "" or 128 hex digits."""
    if salted and not _SALTED_HASH.fullmatch(salted):
        raise InvalidArgumentError("a hashed password is the salted SHA-512 of the password, in hex")
    return salted


def _bcrypt_input(salted: str) -> bytes:
    return salted.encode()[:BCRYPT_MAX_BYTES]


# -- decisions --------------------------------------------------------------------------


def checked_username(username: str) -> str:
    if not _USERNAME.fullmatch(username):
        raise InvalidArgumentError(f"invalid username {username!r}: 1 to 128 letters, digits or _ . @ + -")
    return username


def user_created(
    user_id: int, username: str, *, display_name: str, admin: bool, password_hash: str, created_by: str
) -> Append:
    """A new user: its name is taken once (the message id), its id once (version 0)."""
    created = events_pb2.UserCreated(
        user_id=user_id,
        username=checked_username(username),
        display_name=display_name,
        admin=admin,
        active=True,
        password_hash=password_hash,
        created_by=created_by,
    )
    return Append(aggregate("user", user_id), created, f"user-created-{username}", expected_version=0)


def user_updated(
    directory: Directory,
    actor: User,
    target: User,
    *,
    new_username: str | None,
    display_name: str | None,
    admin: bool | None,
    active: bool | None,
) -> Append | Unchanged:
    """The fields that differ from the target's; who may change what is checked first."""
    if new_username is not None or admin is not None or active is not None:
        check_admin(actor, "renaming a user, (de)activating one or changing the admin flag")
    elif display_name is not None and actor.user_id != target.user_id:
        check_admin(actor, "changing another user's display name")
    update = events_pb2.UserUpdated(user_id=target.user_id)
    if new_username is not None and new_username != target.username:
        if directory.by_name(checked_username(new_username)) is not None:
            raise InvalidArgumentError(f"the username {new_username} is taken")
        update.username = new_username
    if display_name is not None and display_name != target.display_name:
        update.display_name = display_name
    if admin is not None and admin != target.admin:
        if target.user_id == actor.user_id and not admin:
            raise InvalidArgumentError("an admin cannot take away their own admin flag")
        update.admin = admin
    if active is not None and active != target.active:
        if target.user_id == actor.user_id and not active:
            raise InvalidArgumentError("an admin cannot deactivate themselves")
        update.active = active
    if update == events_pb2.UserUpdated(user_id=target.user_id):
        return Unchanged(f"user {target.username} is like that already: nothing to do")
    return Append(
        aggregate("user", target.user_id),
        update,
        f"user-updated-{target.user_id}-{target.version}",
        expected_version=target.version,
    )


def password_changed(actor: User, target: User, password_hash: str) -> Append:
    if actor.user_id != target.user_id:
        check_admin(actor, "changing another user's password")
    changed = events_pb2.UserPasswordChanged(user_id=target.user_id, password_hash=password_hash)
    return Append(
        aggregate("user", target.user_id),
        changed,
        f"user-password-{target.user_id}-{target.version}",
        expected_version=target.version,
    )


def session_started(user_id: int, session_id: str, expires_at_ns: int) -> Append:
    started = events_pb2.UserSessionStarted(
        user_id=user_id, session_id=session_id, expires_at_ns=expires_at_ns
    )
    return Append(aggregate("user", user_id), started, f"session-started-{session_id}")


def session_revoked(user_id: int, session_id: str) -> Append:
    revoked = events_pb2.UserSessionRevoked(user_id=user_id, session_id=session_id)
    return Append(aggregate("user", user_id), revoked, f"session-revoked-{session_id}")


def login_failed(user: User, address: str, reason: str, now_ns: int) -> tuple[Append, str]:
    """A failed login to an existing user, and its actor ("address:<client>").
    Its message id names the user, the address and the minute, so that the
    log's duplicate window stores at most one per user and address per minute."""
    address = address[:MAX_ADDRESS_CHARS]
    failed = events_pb2.UserLoginFailed(
        user_id=user.user_id, username=user.username, address=address, reason=reason
    )
    minute = now_ns // (60 * 10**9)
    msg_id = f"login-failed-{user.user_id}-{address}-{minute}"
    return Append(aggregate("user", user.user_id), failed, msg_id), f"address:{address}"


def check_admin(actor: User, what: str) -> None:
    if not actor.admin:
        raise PermissionDeniedError(f"{what} needs an admin; {actor.username} is not one")
