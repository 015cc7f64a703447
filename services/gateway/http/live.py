"""Live pages: server-sent events telling a web UI page that what it shows has
changed, so that it fetches it again instead of polling.

One mechanism for every page: the projector wakes what waits on the names
(`watched.shown`) of the pages a committed batch changed
(Projector.watching, as it wakes WatchAllocation's long polls), and a page's
stream sends `event: changed` for it. Notices are coalesced: at most one per
NOTICE_INTERVAL_S, however many batches a busy cluster commits; a change
while one waits is sent once that time is up. A comment every KEEPALIVE_S
keeps idle connections open through proxies. The notice says nothing of what
changed: the page asks the API, through the same queries as any call (so a
token that expires while its stream is open gets its 401 at that fetch).
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from services.gateway.errors import ReadModelsUnavailableError
from services.gateway.projector import Projector

CHANGED = b"event: changed\ndata: {}\n\n"
KEEPALIVE = b": keep-alive\n\n"
# How long EventSource waits before it connects again after a drop.
RETRY = b"retry: 2000\n\n"
NOTICE_INTERVAL_S = 0.5
KEEPALIVE_S = 15.0
MEDIA_TYPE = "text/event-stream"
HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}

# The names a page waits on, asked again after each notice (an experiment's
# page waits on its trials too, and it may gain some).
Names = Callable[[], Awaitable[set[str]]]


async def notices(
    projector: Projector, names: set[str], renamed: Names | None = None
) -> AsyncIterator[bytes]:
    """The stream of a page that shows `names`; `renamed` gives them again
    after each notice (None: they never change)."""
    watches = contextlib.ExitStack()
    changed = watches.enter_context(projector.watching(names))
    try:
        yield RETRY
        while True:
            if not await _set_within(changed, KEEPALIVE_S):
                yield KEEPALIVE
                continue
            changed.clear()
            yield CHANGED
            await asyncio.sleep(NOTICE_INTERVAL_S)
            fresh = await _names(renamed, names)
            if fresh != names:
                # The new names are watched before the old ones are left: no change falls between.
                rewatched = contextlib.ExitStack()
                now_changed = rewatched.enter_context(projector.watching(fresh))
                if changed.is_set():
                    now_changed.set()
                watches.close()
                watches, changed, names = rewatched, now_changed, fresh
    finally:
        watches.close()


async def _set_within(event: asyncio.Event, timeout_s: float) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


async def _names(renamed: Names | None, names: set[str]) -> set[str]:
    """The page's names now; the same while PostgreSQL is down."""
    if renamed is None:
        return names
    try:
        return await renamed()
    except ReadModelsUnavailableError:
        return names
