"""Concurrent queries embedded together: one ``embed.text`` call for every question waiting.

A query that finds fewer than ``in_flight`` embedding calls running leads a call at once (a
lone query pays nothing); one that finds them all busy waits, and the next call to start takes
every waiting question (up to ``max_batch``).  Under many callers the embedder thus gets full
batches instead of one call per question, with no background task and no timer.
"""

from __future__ import annotations

from collections import deque

import anyio
import numpy as np

from hearthnet.contracts.embed import Embedder
from hearthnet.errors import BusError, InternalError

__all__ = ["QueryEmbedder"]


class _Waiting:
    __slots__ = ("error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: BusError | None = None


class QueryEmbedder:
    """Embeds one query text per :meth:`embed`, batching the texts of concurrent callers."""

    def __init__(self, embedder: Embedder, *, max_batch: int = 32, in_flight: int = 2) -> None:
        if max_batch < 1 or in_flight < 1:
            raise ValueError("max_batch and in_flight must be positive")
        self._embedder = embedder
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._queue: deque[_Waiting] = deque()
        self._running = 0
        self._changed = anyio.Event()
        self.calls = 0
        """``embed.text`` calls made (stats and tests)."""

    async def embed(self, text: str) -> np.ndarray:
        """The unit vector of ``text``; the embedder's error (``partition``, ``timeout``...) if its
        call failed."""
        me = _Waiting(text)
        self._queue.append(me)
        try:
            while me.vector is None and me.error is None:
                if self._running < self._in_flight and self._queue:
                    await self._lead()
                else:
                    changed = self._changed
                    await changed.wait()
        finally:
            if me in self._queue:  # cancelled while waiting: nobody embeds it
                self._queue.remove(me)
        if me.error is not None:
            raise me.error
        assert me.vector is not None
        return me.vector

    async def _lead(self) -> None:
        batch = [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]
        self._running += 1
        self.calls += 1
        try:
            # Other callers' questions are in this call: it runs to its end even if this caller is
            # cancelled meanwhile (the embedder's own timeout bounds it).
            with anyio.CancelScope(shield=True):
                vectors = (await self._embedder.embed([w.text for w in batch])).vectors
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, BusError)
                else InternalError(f"query embedding failed: {type(exc).__name__}")
            )
            for w in batch:
                w.error = error
        else:
            for w, row in zip(batch, vectors, strict=True):
                w.vector = row
        finally:
            self._running -= 1
            self._wake()

    def _wake(self) -> None:
        """Tell every waiter that a call ended (its vector may be ready, or a slot is free)."""
        changed, self._changed = self._changed, anyio.Event()
        changed.set()
