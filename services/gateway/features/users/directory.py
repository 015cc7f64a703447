"""The gateway's in-memory directory of users and sessions (users.Directory),
kept current by following the `user/<id>` events of the log: a token check
reads memory only, and a change this gateway appends (a logout, a
deactivation) is folded before its RPC answers (`wait_for`). Another
gateway's changes arrive as fast as the log delivers them.

It follows the log itself, not the PostgreSQL read models, so that users can
log in and calls are authenticated while PostgreSQL is down.

The first gateway that finds no user creates the built-in `admin` and
`determined` with the cluster's initial password.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from typing import cast

import structlog

from determined.common.passwords import salted_hash
from services.common.eventlog import ConflictError, StoredEvent
from services.common.eventstore import EventStore
from services.gateway.features.users import accounts as users

# How often sessions past their expiry are forgotten.
FORGET_EVERY_S = 3600.0

log = structlog.get_logger()


class InitialPasswordError(Exception):
    """A fresh cluster with no initial password, where blank is not allowed."""


class UserDirectory:
    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.current = users.Directory()
        self._advanced = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Folds what the log holds, then follows it in a task."""
        self._task = asyncio.create_task(self._follow(), name="user-directory")
        self._task.add_done_callback(_report_end)
        await self.catch_up()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self) -> None:
        forgotten_at = time.monotonic()
        reading = cast(AsyncGenerator[list[StoredEvent], None], self.store.read_batches(["user"]))
        async with contextlib.aclosing(reading) as batches:
            async for batch in batches:
                for stored in batch:
                    self.current.apply(stored.sequence, stored.envelope)
                if time.monotonic() - forgotten_at > FORGET_EVERY_S:
                    self.current.forget_expired(time.time_ns())
                    forgotten_at = time.monotonic()
                async with self._advanced:
                    self._advanced.notify_all()

    async def wait_for(self, sequence: int, timeout_s: float = 10.0) -> bool:
        """Waits until the directory holds the log up to `sequence`; False after `timeout_s`."""
        if self.current.position >= sequence:
            return True
        async with self._advanced:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._advanced.wait_for(lambda: self.current.position >= sequence)
            except TimeoutError:
                return False
        return True

    async def catch_up(self, timeout_s: float = 10.0) -> bool:
        """Waits until the directory holds every user event stored right now."""
        return await self.wait_for(await self.store.last_sequence_of(["user"]), timeout_s)

    async def create_built_in_users(self, initial_password: str, *, allow_blank: bool) -> None:
        """`admin` and `determined` with the initial password, when there is no
        user yet (another gateway may be creating them at the same moment:
        the ids and message ids make that harmless)."""
        await self.catch_up()
        if self.current.users:
            return
        if not initial_password and not allow_blank:
            raise InitialPasswordError(
                "a new cluster needs a password for admin and determined: set DET_INITIAL_USER_PASSWORD"
                " (or DET_ALLOW_BLANK_PASSWORD=1 to leave them without one)"
            )
        salted = salted_hash(initial_password)
        for user_id, username, admin in users.BUILT_IN_USERS:
            password_hash = await asyncio.to_thread(users.hash_password, salted)
            created = users.user_created(
                user_id,
                username,
                display_name="",
                admin=admin,
                password_hash=password_hash,
                created_by="cluster",
            )
            with contextlib.suppress(ConflictError):
                await self.store.append(created, actor="cluster")
        await self.catch_up()
        log.info("built_in_users_created", users=[name for _, name, _ in users.BUILT_IN_USERS])


def _report_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("user_directory_failed", error=repr(task.exception()))
