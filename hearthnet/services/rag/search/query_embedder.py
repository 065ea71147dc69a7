"""Concurrent queries embedded together: one ``embed.text`` call for every question waiting.

A query that finds fewer than ``in_flight`` embedding calls running leads a call at once (a
lone query pays nothing); one that finds them all busy waits, and the next call to start takes
every waiting question (up to ``max_batch``).  Under many callers the embedder thus gets full
batches instead of one call per question, with no background task and no timer.

The wait is first come, first served, so it is fair; it is bounded by time, not by a fixed
count: a question that would wait longer than ``wait_budget`` seconds at the rate questions
were embedded lately is refused at once with ``capacity_exceeded`` and a ``retry_after_ms``
(a slow node refuses early instead of letting its callers reach their deadlines).
"""

from __future__ import annotations

from collections import deque

import anyio
import numpy as np

from hearthnet.contracts.embed import Embedder
from hearthnet.errors import BusError, CapacityExceeded, InternalError

__all__ = ["QueryEmbedder"]


class _Waiting:
    __slots__ = ("error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.vector: np.ndarray | None = None
        self.error: BusError | None = None


class QueryEmbedder:
    """Embeds one query text per :meth:`embed`, batching the texts of concurrent callers."""

    def __init__(
        self, embedder: Embedder, *, max_batch: int = 32, in_flight: int = 2, wait_budget: float = 1.5
    ) -> None:
        if max_batch < 1 or in_flight < 1 or wait_budget <= 0:
            raise ValueError("max_batch, in_flight and wait_budget must be positive")
        self._embedder = embedder
        self._max_batch = max_batch
        self._in_flight = in_flight
        self._wait_budget = wait_budget
        self._queue: deque[_Waiting] = deque()
        self._running = 0
        self._changed = anyio.Event()
        self._per_question: float | None = None
        """Seconds of a call per question it held, smoothed over recent calls (``None``: no call yet)."""
        self.calls = 0
        """``embed.text`` calls made (stats and tests)."""

    def _rate(self) -> float | None:
        """Questions/s the running calls get through, from the recent calls."""
        if self._per_question is None:
            return None
        return self._in_flight / max(self._per_question, 1e-6)

    async def embed(self, text: str) -> np.ndarray:
        """The unit vector of ``text``; the embedder's error (``partition``, ``timeout``...) if its
        call failed; ``capacity_exceeded`` if it would wait longer than the budget."""
        rate = self._rate()
        if rate is not None and len(self._queue) >= max(self._max_batch, rate * self._wait_budget):
            wait_ms = int(1000 * len(self._queue) / rate)
            raise CapacityExceeded(
                f"{len(self._queue)} questions are waiting to be embedded (about {wait_ms} ms of work)",
                retry_after_ms=max(50, min(wait_ms, 5000)),
            )
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
            started = anyio.current_time()
            with anyio.CancelScope(shield=True):
                vectors = (await self._embedder.embed([w.text for w in batch])).vectors
            took = (anyio.current_time() - started) / len(batch)
            self._per_question = took if self._per_question is None else 0.7 * self._per_question + 0.3 * took
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
