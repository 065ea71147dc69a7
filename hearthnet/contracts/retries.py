"""How a caller comes back after ``capacity_exceeded``: the wait before each retry, and a call
tried again while the node says it is busy.  The bus's callers all retry this way (the client
behind the CLI and the UI, a folder's ingest on a node), so a busy node sees them come back spread
out, never all at once."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from hearthnet.errors import CapacityExceeded

__all__ = ["RETRY_FIRST_SECONDS", "RETRY_MAX_SECONDS", "retry_wait", "while_busy"]

RETRY_FIRST_SECONDS = 0.05
"""The random part of the first wait after ``capacity_exceeded``; it doubles on each retry."""
RETRY_MAX_SECONDS = 5.0
"""At most this much of a wait comes from the node's hint, and at most this much is random."""

T = TypeVar("T")


def retry_wait(retry: int, hint_ms: int) -> float:
    """Seconds to wait before retry number ``retry`` (0 for the first) of a refused call.

    The node's ``retry_after_ms`` hint (a typical call's time there: when a slot should
    be free; at most ``RETRY_MAX_SECONDS``) plus a random share of a window that doubles
    on each retry (50 ms, 100 ms, ... at most ``RETRY_MAX_SECONDS``): callers refused at
    the same moment come back spread out instead of all at once again.
    """
    window = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** min(retry, 16))
    return min(max(hint_ms, 0) / 1000, RETRY_MAX_SECONDS) + random.uniform(0, window)


async def while_busy(
    call: Callable[[], Awaitable[T]], *, within: float, waiting: Callable[[], None] | None = None
) -> T:
    """``call``, tried again after :func:`retry_wait` while refused with ``capacity_exceeded`` and
    a retry hint, for ``within`` seconds; then the last refusal.  A refusal without a hint (a full
    disk, a blob store at its cap) is not busy: it is final.  ``waiting()`` is told of each wait."""
    until = anyio.current_time() + within
    retry = 0
    while True:
        try:
            return await call()
        except CapacityExceeded as exc:
            if exc.retry_after_ms is None:
                raise
            wait = retry_wait(retry, exc.retry_after_ms)
            if anyio.current_time() + wait > until:
                raise
            retry += 1
            if waiting is not None:
                waiting()
            await anyio.sleep(wait)
