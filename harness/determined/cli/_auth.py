"""Who the CLI and the SDK act as, and the session tokens they keep.

Tokens are cached per master in `<config dir>/determined-es/auth.json` (the
config dir: $XDG_CONFIG_HOME or ~/.config; $DET_CONFIG_DIR names the folder
that holds auth.json instead), mode 0600 in a folder of mode 0700, as
Determined's CLI keeps its own:

    {"masters": {"localhost:8080": {"active_user": "admin", "tokens": {"admin": "<token>"}}}}

A call acts as, in this order: the user named by `-u` (or the SDK's `user`),
DET_USER with DET_PASS, the master's active user (the last `det user login`),
or `determined` with an empty password. A cached token is used when the
gateway still takes it; else the user logs in again (asked for the password
when none was given). When that last login is refused, calls go without a
token, and the gateway says that the user must log in.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from determined.cli._client import UNAUTHENTICATED_METHODS, CliError, bearer
from determined.common.passwords import salted_hash

DEFAULT_USER = "determined"
# What a master answers a login of `determined` with an empty password with when it
# takes calls without a token (a test's gateway, one from before users): no token then.
NO_DEFAULT_LOGIN = ("UNAUTHENTICATED", "UNIMPLEMENTED")


def config_folder() -> Path:
    configured = os.environ.get("DET_CONFIG_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "determined-es"


class TokenStore:
    """The cached tokens and the active user of one master. Every change is a
    locked read-modify-write and an atomic replace: two `det` commands at once
    lose nothing and never leave half a file."""

    def __init__(self, master: str, folder: Path | None = None) -> None:
        self.master = master
        self.path = (folder or config_folder()) / "auth.json"

    def active_user(self) -> str | None:
        user = self._master_entry(self._read()).get("active_user")
        return str(user) if user else None

    def token(self, user: str) -> str | None:
        token = self._master_entry(self._read()).get("tokens", {}).get(user)
        return str(token) if token else None

    def users(self) -> list[str]:
        return sorted(self._master_entry(self._read()).get("tokens", {}))

    def remember(self, user: str, token: str, *, active: bool) -> None:
        with self._changing() as entry:
            entry.setdefault("tokens", {})[user] = token
            if active:
                entry["active_user"] = user

    def forget(self, user: str, *, keep_active: bool = False) -> None:
        """Drops the user's token; unless `keep_active` (a refused token: the
        user logs in again), the master has no active user after if it was this one."""
        with self._changing() as entry:
            entry.get("tokens", {}).pop(user, None)
            if entry.get("active_user") == user and not keep_active:
                entry.pop("active_user")

    def _master_entry(self, document: dict[str, Any]) -> dict[str, Any]:
        entry = document.get("masters", {}).get(self.master, {})
        return entry if isinstance(entry, dict) else {}

    def _read(self) -> dict[str, Any]:
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as problem:
            raise CliError(f"cannot read the login cache {self.path}: {problem}") from None
        return document if isinstance(document, dict) else {}

    @contextlib.contextmanager
    def _changing(self) -> Iterator[dict[str, Any]]:
        folder = self.path.parent
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder.chmod(0o700)
        lock_fd = os.open(folder / "auth.json.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            document = self._read()
            masters = document.setdefault("masters", {})
            entry = masters.setdefault(self.master, {})
            yield entry
            if not entry.get("tokens") and not entry.get("active_user"):
                masters.pop(self.master)
            self._write(document)
        finally:
            os.close(lock_fd)

    def _write(self, document: dict[str, Any]) -> None:
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".auth-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as out:  # mkstemp makes it 0600
                json.dump(document, out, indent=2)
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def read_password(prompt: str) -> str:
    """A password from the terminal (not echoed), or one line of stdin when it
    is not a terminal (`echo ... | det user login alice`)."""
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(prompt)
    line = sys.stdin.readline() if sys.stdin is not None else ""
    if not line:
        raise CliError(f"{prompt.strip().rstrip(':')}: no password given (no terminal and nothing on stdin)")
    return line.rstrip("\n")


class Session:
    """The token of whoever the calls to one master act as, found on first
    need (see the module's order) and kept for the life of the object.

    `login(user, hashed_password) -> token` and `valid(token) -> bool` are the
    gateway's Login and GetMe, so that this class does no I/O of its own but
    the cache's."""

    def __init__(
        self,
        store: TokenStore,
        login: Callable[[str, str], str],
        valid: Callable[[str], bool],
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        self._store = store
        self._login = login
        self._valid = valid
        self._requested_user = user
        self._requested_password = password
        self._token: str | None = None
        self._resolved = False
        self._resolving = threading.Lock()  # an SDK's threads: one login, not one each
        # Whom the calls act as, once resolved.
        self.user = ""

    def token(self) -> str | None:
        """None: calls go without a token (see the module)."""
        with self._resolving:
            if not self._resolved:
                self._token = self._resolve()
                self._resolved = True
        return self._token

    def _resolve(self) -> str | None:
        user, password = self._requested_user, self._requested_password
        if user is None and os.environ.get("DET_USER"):
            user, password = os.environ["DET_USER"], os.environ.get("DET_PASS", password)
        active = self._store.active_user()
        fallback = user is None and active is None
        user = user or active or DEFAULT_USER
        self.user = user
        cached = self._store.token(user)
        if cached is not None:
            if self._valid(cached):
                return cached
            self._store.forget(user, keep_active=True)
        if fallback:
            password = ""
        elif password is None:
            password = read_password(f"Password for user '{user}': ")
        try:
            token = self._login(user, salted_hash(password))
        except CliError as refused:
            if fallback and refused.code in NO_DEFAULT_LOGIN:
                return None
            raise
        self._store.remember(user, token, active=user == active)
        return token


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _Details(_CallDetails, grpc.ClientCallDetails):  # type: ignore[misc]
    pass


class BearerToken(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the session's token to every call but those in
    UNAUTHENTICATED_METHODS; `token()` runs on the first call that needs it,
    in the calling thread (it may ask for a password)."""

    def __init__(self, token: Callable[[], str | None]) -> None:
        self._token = token

    def _with_token(self, details: Any) -> Any:
        if str(details.method).rsplit("/", 1)[-1] in UNAUTHENTICATED_METHODS:
            return details
        token = self._token()
        if token is None:
            return details
        metadata = [*(details.metadata or ()), *bearer(token)]
        return _Details(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)
