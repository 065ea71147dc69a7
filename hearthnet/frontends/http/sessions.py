"""The signed-in browsers, kept in memory and read again whenever the token store changes."""

from __future__ import annotations

import contextlib
import dataclasses
import time

import anyio

from hearthnet.community.levels import Level
from hearthnet.errors import DiskFull
from hearthnet.frontends.http.standing import NodeStanding
from hearthnet.frontends.http.tokens import Session, TokenStore, digest

__all__ = ["SessionCache"]

TOUCH_SECONDS = 60.0
"""A token's ``last_used`` is written at most this often (each write makes every cache re-read)."""


class SessionCache:
    """Session lookups without a database read per request.

    The store's change counter (four bytes of its header) is compared on each lookup; when a
    write was committed since (a login here, ``hearthnet ui token revoke`` in another process),
    the sessions are read again in a worker thread.  A revoked token's sessions are gone on the
    next request.  A session acts with at most this node's own level (``standing``: see
    :mod:`~hearthnet.frontends.http.standing`), whatever its token says.
    """

    def __init__(self, store: TokenStore, standing: NodeStanding | None = None) -> None:
        self._store = store
        self._standing = standing
        self._sessions: dict[str, Session] = {}
        self._counter = b""
        self._lock = anyio.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        self._touched: dict[str, float] = {}

    async def _fresh(self) -> None:
        if self._store.change_counter() == self._counter:
            return
        async with self._lock:
            counter = self._store.change_counter()  # read before the rows: a later write shows next time
            if counter != self._counter:
                self._sessions = await anyio.to_thread.run_sync(self._store.sessions, limiter=self._limiter)
                self._counter = counter

    async def lookup(self, cookie: str | None) -> Session | None:
        """The live session of a cookie value, or ``None``."""
        if not cookie:
            return None
        await self._fresh()
        session = self._sessions.get(digest(cookie))
        now = time.time()
        if session is None or session.expires < now:
            return None
        if now - self._touched.get(session.token_id, 0.0) >= TOUCH_SECONDS:
            self._touched[session.token_id] = now
            with contextlib.suppress(DiskFull):  # a note of when it was used: not worth refusing over
                await anyio.to_thread.run_sync(self._store.touch, session.token_id, limiter=self._limiter)
        return await self._bounded(session)

    async def redeem(self, token: str) -> tuple[Session, str] | None:
        """A new session for a login token (see :meth:`TokenStore.redeem`)."""
        redeemed = await anyio.to_thread.run_sync(self._store.redeem, token, limiter=self._limiter)
        if redeemed is None:
            return None
        return await self._bounded(redeemed[0]), redeemed[1]

    async def preview(self, token: str) -> tuple[str, Level] | None:
        """Who a login token would sign in (its name and the level it would act with), without
        using it; ``None`` if it would not sign anyone in."""
        info = await anyio.to_thread.run_sync(self._store.peek, token, limiter=self._limiter)
        if info is None:
            return None
        if self._standing is None:
            return info.name, info.level
        return info.name, min(info.level, (await self._standing.get()).level)

    async def _bounded(self, session: Session) -> Session:
        """``session`` acting with at most the node's level, and told if the node was revoked."""
        if self._standing is None:
            return session
        standing = await self._standing.get()
        if session.level <= standing.level and standing.revoked is None:
            return session
        return dataclasses.replace(
            session, level=min(session.level, standing.level), revoked=standing.revoked
        )

    async def end(self, session: Session) -> None:
        await anyio.to_thread.run_sync(self._store.end_session, session.key, limiter=self._limiter)
        self._sessions.pop(session.key, None)
