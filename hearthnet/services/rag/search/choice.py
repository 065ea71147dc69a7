"""Where a query searches: on the event loop, or in a read thread — decided here, once.

A corpus whose in-memory copy is small enough is searched on the event loop (a matrix product
of about a millisecond at the bound, against two thread hops); anything else (a larger copy, a
filter, HNSW, a store busy writing) is searched in one of the read threads.  The figures behind
the bound are in ``specs/rag.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads

__all__ = ["INLINE_SEARCH_FLOATS", "search_here_or_in_thread"]

T = TypeVar("T")

INLINE_SEARCH_FLOATS = 6_000_000
"""Vector components of an in-memory copy searched on the event loop at most (about 15,600
chunks of 384 dimensions, 24 MB)."""


async def search_here_or_in_thread(
    here: Callable[[int], T | None], in_thread: Callable[[], T], threads: WorkerThreads
) -> T:
    """``here(INLINE_SEARCH_FLOATS)`` on the loop if it answers (never blocking, never waiting for a
    lock), else ``in_thread()`` in one of ``threads``."""
    found = here(INLINE_SEARCH_FLOATS)
    if found is not None:
        return found
    result: T = await run_blocking(in_thread, limiter=threads)
    return result
