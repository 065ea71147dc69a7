"""Who may write a corpus now: any number of ingests and deletes, or one reindex alone; and one
ingest or delete of the same document at a time (:class:`DocumentLocks`).

A reindex lists a corpus's documents, re-embeds them (minutes) and then
replaces the corpus: a document ingested meanwhile would be dropped with the
old collection.  So while a corpus is being reindexed, ingests into it are
refused at once with ``capacity_exceeded`` and a ``retry_after_ms`` estimated
from the reindex's progress (an ingest waiting instead could sit for most of
an hour holding one of the node's ingest slots); and a reindex first waits for
the ingests already running on that corpus to finish.

Only the event loop touches a :class:`CorpusGate` (no threads), so plain
dictionaries and :class:`anyio.Event` suffice.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from hearthnet.errors import CapacityExceeded

__all__ = ["CorpusGate", "DocumentLocks", "Reindexing"]

RETRY_UNKNOWN_MS = 30_000
"""Retry hint while a reindex has not finished its first document."""
RETRY_MIN_MS = 1_000
RETRY_MAX_MS = 600_000


@dataclass
class Reindexing:
    """Progress of one reindex, for the retry hint given to refused ingests."""

    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def retry_after_ms(self) -> int:
        if self.done == 0 or self.total == 0:
            return RETRY_UNKNOWN_MS
        per_doc = (time.monotonic() - self.started) / self.done
        left = per_doc * (self.total - self.done + 1)  # + 1: writing the new collection
        return int(min(RETRY_MAX_MS, max(RETRY_MIN_MS, left * 1000)))


class CorpusGate:
    """Ingests share a corpus; a reindex has it alone (see the module docstring)."""

    def __init__(self) -> None:
        self._writers: dict[str, int] = {}
        self._idle: dict[str, anyio.Event] = {}
        self._reindexing: dict[str, Reindexing] = {}

    def writers(self, corpus: str) -> int:
        """Ingests running on ``corpus`` now."""
        return self._writers.get(corpus, 0)

    @asynccontextmanager
    async def ingest(self, corpus: str, *, undone: str = "nothing was stored: ingest") -> AsyncIterator[None]:
        """Hold ``corpus`` for one ingest (or delete); ``CapacityExceeded`` while it is being reindexed.

        ``undone`` names what did not happen and what to do again (a delete says its own).
        """
        progress = self._reindexing.get(corpus)
        if progress is not None:
            raise CapacityExceeded(
                f"corpus {corpus} is being reindexed ({progress.done} of {progress.total or '?'} "
                f"documents re-embedded); {undone} again when the reindex is done",
                retry_after_ms=progress.retry_after_ms(),
            )
        self._writers[corpus] = self._writers.get(corpus, 0) + 1
        try:
            yield
        finally:
            self._writers[corpus] -= 1
            if not self._writers[corpus]:
                del self._writers[corpus]
                idle = self._idle.pop(corpus, None)
                if idle is not None:
                    idle.set()

    @asynccontextmanager
    async def reindex(
        self, corpus: str, on_wait: Callable[[int], Awaitable[None]]
    ) -> AsyncIterator[Reindexing]:
        """Hold ``corpus`` alone: new ingests are refused, running ones are waited for.

        ``on_wait(n)`` is awaited before waiting for ``n`` running ingests.
        """
        progress = self._reindexing.get(corpus)
        if progress is not None:
            raise CapacityExceeded(
                f"corpus {corpus} is already being reindexed", retry_after_ms=progress.retry_after_ms()
            )
        progress = Reindexing()
        self._reindexing[corpus] = progress
        try:
            while self.writers(corpus):
                idle = self._idle.setdefault(corpus, anyio.Event())
                await on_wait(self.writers(corpus))
                await idle.wait()
            progress.started = time.monotonic()
            yield progress
        finally:
            del self._reindexing[corpus]


class DocumentLocks:
    """Ingests and deletes of one document one at a time (no lock kept per document ever seen)."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], tuple[anyio.Lock, list[int]]] = {}
        """(corpus, doc_cid) -> its lock and how many callers hold or await it."""

    @asynccontextmanager
    async def hold(self, corpus: str, doc_cid: str) -> AsyncIterator[None]:
        key = (corpus, doc_cid)
        held = self._locks.get(key)
        if held is None:
            held = self._locks[key] = (anyio.Lock(), [0])
        lock, users = held
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]
