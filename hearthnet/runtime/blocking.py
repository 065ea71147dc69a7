"""The blocking-call helper: a function run off the event loop, in anyio's threads under a limiter
or in one of a :class:`~hearthnet.runtime.worker_threads.WorkerThreads` set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from hearthnet.errors import BusError, InternalError
from hearthnet.runtime.worker_threads import WorkerThreads

__all__ = ["run_blocking"]


async def run_blocking(
    fn: Callable[..., Any], *args: Any, limiter: anyio.CapacityLimiter | WorkerThreads
) -> Any:
    """``fn(*args)`` in a worker thread: anyio's under ``limiter``, or one of the given threads."""
    try:
        if isinstance(limiter, WorkerThreads):
            return await limiter.run(fn, *args)
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
    except BusError:
        raise
    except MemoryError as exc:
        raise InternalError("out of memory while processing the document") from exc
