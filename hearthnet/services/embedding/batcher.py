"""Micro-batching across concurrent callers, without a background task.

Callers queue their items and then take turns (one ``CapacityLimiter`` token
per concurrent inference; a caller runs up to that many turns at once)
running *whatever is pending*, not only their own items: sixteen concurrent
one-query calls become one batch.  A batch takes items round-robin across
queued requests, each request's items shortest first, up to
``max_batch_items`` and ``max_batch_tokens`` padded tokens (rows x longest
row), so one caller's 256 texts delay another caller by at most one bounded
batch per inference slot.  Inference runs in the batcher's own worker threads
(:class:`~hearthnet.runtime.worker_threads.WorkerThreads`, one per limiter token).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import anyio
import numpy as np
import numpy.typing as npt

from hearthnet.errors import BusError, InternalError
from hearthnet.runtime.worker_threads import WorkerThreads

__all__ = ["MicroBatcher", "plan_batch"]

T = TypeVar("T")
RunBatch = Callable[[list[T]], npt.NDArray[np.float32]]


class _Request(Generic[T]):
    __slots__ = ("costs", "done", "error", "items", "next", "order", "out", "remaining")

    def __init__(self, items: Sequence[tuple[T, int]], dim: int) -> None:
        self.items = [item for item, _ in items]
        self.costs = [max(1, int(cost)) for _, cost in items]
        self.order = sorted(range(len(self.items)), key=self.costs.__getitem__)
        self.next = 0
        self.remaining = len(self.items)
        self.out = np.zeros((len(self.items), dim), dtype=np.float32)
        self.done = anyio.Event()
        self.error: BusError | None = None

    @property
    def unscheduled(self) -> int:
        return len(self.order) - self.next


def plan_batch(
    pending: deque[_Request[T]], *, max_items: int, max_tokens: int
) -> list[tuple[_Request[T], int]]:
    """Take the next batch from ``pending`` (pure bookkeeping, no I/O).

    Round-robin over requests, shortest remaining item of each first; a
    request leaves ``pending`` once all its items are taken.  The first item is
    always taken, so an item longer than ``max_tokens`` still runs (alone).
    """
    batch: list[tuple[_Request[T], int]] = []
    width = 0
    progress = True
    while progress and len(batch) < max_items:
        progress = False
        for req in list(pending):
            if len(batch) >= max_items:
                break
            pos = req.order[req.next]
            new_width = max(width, req.costs[pos])
            if batch and new_width * (len(batch) + 1) > max_tokens:
                continue
            batch.append((req, pos))
            width = new_width
            req.next += 1
            progress = True
            if req.unscheduled == 0:
                pending.remove(req)
    if pending:
        pending.rotate(-1)  # the next batch starts with another caller
    return batch


class MicroBatcher(Generic[T]):
    """Combine concurrent ``submit`` calls into bounded batches for ``run_batch``.

    ``run_batch(items) -> (len(items), dim) float32`` is blocking and runs in a
    worker thread; it must be safe to call from ``limiter.total_tokens``
    threads at once.  :meth:`close` ends the threads.
    """

    def __init__(
        self,
        run_batch: RunBatch[T],
        *,
        dim: int,
        limiter: anyio.CapacityLimiter,
        max_batch_items: int = 32,
        max_batch_tokens: int = 2048,
        nice: int = 0,
    ) -> None:
        """``nice`` > 0: the inference threads run at a lower CPU priority (a bulk lane)."""
        if max_batch_items < 1 or max_batch_tokens < 1:
            raise ValueError("batch bounds must be positive")
        self._run_batch = run_batch
        self._dim = dim
        self._limiter = limiter
        self._max_items = max_batch_items
        self._max_tokens = max_batch_tokens
        self._pending: deque[_Request[T]] = deque()
        self._threads = WorkerThreads(
            max(1, min(int(limiter.total_tokens), 64)), "embed-bulk" if nice > 0 else "embed", nice=nice
        )
        self._running = 0  # batches planned and not finished
        self.batches_run = 0
        """Count of ``run_batch`` calls (stats and tests)."""

    async def submit(self, items: Sequence[tuple[T, int]]) -> npt.NDArray[np.float32]:
        """``items`` are ``(item, cost)`` pairs; returns their vectors in the same order."""
        req: _Request[T] = _Request(items, self._dim)
        if not req.items:
            return req.out
        self._pending.append(req)
        try:
            if len(self._pending) == 1 and self._one_batch(req) and self._runs_alone(req) and self._take():
                # Fast path (a lone small caller on an idle model, e.g. one query): its turn runs
                # right here, without helper tasks or a pass through the event loop for the free
                # token; callers arriving meanwhile join the next batch.
                try:
                    await self._run_one()
                finally:
                    self._limiter.release()
            # Up to one worker per limiter token, so a single large call still uses every inference slot.
            workers = min(int(self._limiter.total_tokens), req.unscheduled)
            if workers:
                async with anyio.create_task_group() as tg:
                    for _ in range(workers):
                        tg.start_soon(self._work, req)
            if not req.done.is_set():
                await req.done.wait()  # anything left is in flight on another caller's turn
        finally:
            if req in self._pending:  # cancelled before all items ran: drop the rest
                self._pending.remove(req)
        if req.error is not None:
            raise req.error
        return req.out

    def _one_batch(self, req: _Request[T]) -> bool:
        return len(req.items) <= self._max_items and max(req.costs) * len(req.items) <= self._max_tokens

    def _take(self) -> bool:
        """The free token, without waiting; ``False`` if a waiter is owed it (some anyio
        versions show a released token as free until the waiter it was handed to resumes)."""
        try:
            self._limiter.acquire_nowait()
        except anyio.WouldBlock:
            return False
        return True

    def _runs_alone(self, req: _Request[T]) -> bool:
        """A free token, and nothing to share it with: one item, or no second free token."""
        free = self._limiter.available_tokens
        return free >= 1 and (len(req.items) == 1 or free < 2)

    def _share(self) -> int:
        """Most items this turn takes: an even share of what waits over the inference slots not
        running a batch (a call of nine texts on an idle model runs as 5 + 4 on two threads,
        not 9 on one), never more than ``max_batch_items``."""
        slots = int(self._limiter.total_tokens) - self._running
        if slots < 2:
            return self._max_items
        waiting = sum(r.unscheduled for r in self._pending)
        return max(1, min(self._max_items, -(-waiting // slots)))

    async def _work(self, req: _Request[T]) -> None:
        while req.unscheduled and not req.done.is_set():
            async with self._limiter:
                await self._run_one()

    async def _run_one(self) -> None:
        batch = plan_batch(self._pending, max_items=self._share(), max_tokens=self._max_tokens)
        if not batch:
            return
        self._running += 1
        try:
            # The batch holds other callers' items, taken out of the queue: it runs to its end even
            # if this caller is cancelled meanwhile (before the thread starts, too), or they would
            # wait for rows that never come until their own deadlines.
            with anyio.CancelScope(shield=True):
                rows = await self._threads.run(self._run_batch, [r.items[pos] for r, pos in batch])
            if rows.shape != (len(batch), self._dim):
                raise InternalError(
                    f"embedding batch returned shape {rows.shape}, expected ({len(batch)}, {self._dim})"
                )
        except Exception as exc:
            err = (
                exc
                if isinstance(exc, BusError)
                else InternalError(f"embedding inference failed: {type(exc).__name__}")
            )
            for req, _ in batch:
                if req.error is None:
                    req.error = err
                if req in self._pending:
                    self._pending.remove(req)
                req.done.set()
            return
        finally:
            self._running -= 1
            self.batches_run += 1
        # No checkpoint from here on: results reach their callers even if this task is being cancelled.
        for (req, pos), row in zip(batch, rows, strict=True):
            req.out[pos] = row
            req.remaining -= 1
            if req.remaining == 0 and req.error is None:
                req.done.set()

    def close(self) -> None:
        """End the inference threads once the batches already running are done."""
        self._threads.close()
