"""A fixed set of worker threads for blocking work on a query's path, one pass through the loop a call.

``anyio.to_thread.run_sync`` passes through the event loop three times a call
(a checkpoint, its limiter's checkpoint, the result) and hands the job to its
thread through a ``queue.Queue`` (a lock and a condition a job).  A query
crosses to a thread twice (the embedding batch, the store search), so each
hop and each pass through the loop counts (figures in ``specs/embedding.md``).
:class:`WorkerThreads` submits to its own ``ThreadPoolExecutor``
(at most ``threads`` at once, the rest wait in its queue, first come first
served) and awaits the future: one pass.

As with ``anyio.to_thread.run_sync``: a caller cancelled while its function
waits in the queue (or before) gives it up, and it never runs; a caller
cancelled while its function runs waits for the function to end (what the
function uses stays valid) and then sees the cancellation (anyio's returns
the result first; here it is dropped).  The function runs with a copy of the caller's context variables.
Off asyncio (the node always runs on asyncio or uvloop) it falls back to
``anyio.to_thread.run_sync`` with a limiter of the same size.

Only for functions that never call back into the event loop: these threads are
not anyio's, so ``anyio.from_thread`` does not work in them.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio
import anyio.lowlevel

from hearthnet.errors import Partition

__all__ = ["WorkerThreads"]

T = TypeVar("T")


def _lower_priority(nice: int) -> None:
    """In a new worker thread: raise its nice value by ``nice`` (Linux schedules threads alone)."""
    if nice <= 0:
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except (OSError, AttributeError):  # not Linux, or not allowed: the thread keeps the process's
        return


class WorkerThreads:
    def __init__(self, threads: int, name: str, *, nice: int = 0) -> None:
        """``nice`` > 0 runs the threads at a lower CPU priority than the rest of the process
        (bulk work that must yield to queries)."""
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.threads = threads
        self.name = name
        self.nice = nice
        self._executor = ThreadPoolExecutor(
            threads, thread_name_prefix=name, initializer=_lower_priority, initargs=(nice,)
        )
        self._limiter: anyio.CapacityLimiter | None = None  # only off asyncio
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of the threads; its exception is raised here."""
        if self._closed:
            raise Partition(f"{self.name}: this node is shutting down")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop (trio): anyio's threads, bounded alike
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(self.threads)
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        await anyio.lowlevel.checkpoint_if_cancelled()
        context = contextvars.copy_context()
        job = self._executor.submit(context.run, fn, *args)
        waiter = asyncio.wrap_future(job, loop=loop)
        try:
            return await asyncio.shield(waiter)
        except asyncio.CancelledError:
            if job.cancel():
                raise  # still queued: it will never run
            with anyio.CancelScope(shield=True):  # running: a thread cannot be stopped, wait for it
                await asyncio.wait([waiter])
            if not waiter.cancelled():
                waiter.exception()  # its outcome is not wanted: no "never retrieved" warning
            raise

    def close(self) -> None:
        """Refuse new work; what runs or waits finishes in the background.  Idempotent."""
        self._closed = True
        self._executor.shutdown(wait=False)
