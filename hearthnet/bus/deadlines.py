"""One timer task for every deadline of a session's calls, both ways.

A session gives up on its own calls and stops the peer's calls at their times.
Instead of a timed cancel scope per call, one task keeps all those times: an
entry is ``(time, seq, call id, ours?)`` and names its call only by id and
seq, so a finished call is never kept alive by it, and a peer that reuses a
request id is not hit by an old deadline.  New entries go to a list (an
append); only those still pending when the list fills up or the timer task
wakes move into a heap, where finished ones are skipped when they come up (and
pruned when they pile up).  Most calls end long before their deadline and
never reach the heap.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Generic, Protocol, TypeVar

import anyio

from hearthnet.bus.flow import loop_time

FRESH_BATCH = 256
"""Fresh entries gathered before those of calls still pending move into the heap."""
_Entry = tuple[float, int, int, bool]


class Timed(Protocol):
    timer_seq: int
    """The sequence number of the call's latest entry (-1: none)."""


C = TypeVar("C", bound=Timed)


class DeadlineTimer(Generic[C]):
    """Calls ``expire(call)`` at each call's time, for the calls still in ``ours`` or ``theirs``."""

    def __init__(self, ours: Mapping[int, C], theirs: Mapping[int, C], expire: Callable[[C], None]) -> None:
        self._tables = (theirs, ours)
        self._expire = expire
        self.heap: list[_Entry] = []
        self.fresh: list[_Entry] = []
        self._seq = itertools.count()
        self._next = math.inf
        """When the timer task wakes next; -inf once it has been told to look again."""
        self._changed = anyio.Event()

    def add(self, when: float, call: C, rid: int, ours: bool) -> None:
        """Expire ``call`` (request id ``rid``, ours or the peer's) at ``when`` (``loop_time()`` scale)."""
        seq = call.timer_seq = next(self._seq)
        self.fresh.append((when, seq, rid, ours))
        if when < self._next:
            self._next = -math.inf  # the timer task looks again before it sleeps
            self._changed.set()
        elif len(self.fresh) >= FRESH_BATCH:
            self._absorb()

    def _live(self, entry: _Entry) -> C | None:
        """The call an entry was made for, if it is still pending."""
        _, seq, rid, ours = entry
        call = self._tables[ours].get(rid)
        return call if call is not None and call.timer_seq == seq else None

    def _absorb(self) -> None:
        """Move the fresh entries of calls still pending into the heap; prune it if mostly stale."""
        heap, live = self.heap, self._live
        for entry in self.fresh:
            if live(entry) is not None:
                heapq.heappush(heap, entry)
        self.fresh.clear()
        if len(heap) > 1024 and len(heap) > 4 * sum(len(table) for table in self._tables):
            heap[:] = [entry for entry in heap if live(entry) is not None]
            heapq.heapify(heap)

    async def run(self) -> None:
        """Expire each call at its time, until cancelled."""
        heap = self.heap
        while True:
            now = loop_time()
            self._absorb()
            while heap and heap[0][0] <= now:
                call = self._live(heapq.heappop(heap))
                if call is not None:
                    self._expire(call)
            self._next = heap[0][0] if heap else math.inf
            self._changed = anyio.Event()
            with anyio.move_on_after(self._next - now):
                await self._changed.wait()
