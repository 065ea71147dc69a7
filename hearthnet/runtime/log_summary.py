"""Repeated log records counted, not written one by one: the first few of a key, then one summary.

A hostile input can make one line of code log thousands of times (a PDF whose damaged
structure makes pypdf warn for every object, a client sending wrong keys in a loop): written one
by one they rotate everything else out of the log.  :class:`LogSummary` writes the first
``first`` records of each key (a document, a client address) within a window, counts the rest,
and writes one ``<event>_repeated`` record with the count when the key's window closes (seen at
its next record or any other key's) or when :meth:`LogSummary.flush` is called (e.g. at a
document's end).  Thread-safe; the keys it remembers are bounded (the oldest are summarised and
dropped first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

__all__ = ["LogSummary"]

MAX_KEYS = 1024


@dataclass
class _Window:
    started: float
    written: int = 0
    suppressed: int = 0
    fields: dict[str, Any] = field(default_factory=dict)
    """The fields of the key's last suppressed record (ids and counts only, as the records)."""


@dataclass(eq=False)
class LogSummary:
    """Writes ``event`` through ``write(event, **fields)`` at most ``first`` times per key and
    ``window`` seconds; the rest are counted into one ``<event>_repeated`` record (``count``: the
    records not written, ``seconds``: the window's length so far, plus the last one's fields)."""

    write: Callable[..., Any]
    event: str
    _: KW_ONLY
    first: int = 5
    window: float = 60.0
    max_keys: int = MAX_KEYS
    clock: Callable[[], float] = time.monotonic
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _windows: OrderedDict[Hashable, _Window] = field(default_factory=OrderedDict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.first < 1 or self.window <= 0 or self.max_keys < 1:
            raise ValueError("first, window and max_keys must be positive")

    def log(self, key: Hashable, **fields: Any) -> bool:
        """Write or count one record of ``key``; ``True`` if it was written."""
        now = self.clock()
        due: list[tuple[Hashable, _Window]] = []
        with self._lock:
            window = self._windows.get(key)
            if window is not None and now - window.started >= self.window:
                due.append((key, self._windows.pop(key)))
                window = None
            if window is None:
                window = self._windows[key] = _Window(started=now)
                while len(self._windows) > self.max_keys:
                    due.append(self._windows.popitem(last=False))
            self._windows.move_to_end(key)
            due.extend(self._expired(now))
            write = window.written < self.first
            if write:
                window.written += 1
            else:
                window.suppressed += 1
                window.fields = fields
        for old_key, old in due:
            self._summarise(old_key, old, now)
        if write:
            self.write(self.event, **fields)
        return write

    def flush(self, key: Hashable | None = None) -> None:
        """Write the summary of ``key``'s window (every key's with ``None``) and forget it."""
        now = self.clock()
        with self._lock:
            if key is None:
                due = list(self._windows.items())
                self._windows.clear()
            else:
                window = self._windows.pop(key, None)
                due = [] if window is None else [(key, window)]
        for old_key, old in due:
            self._summarise(old_key, old, now)

    def _expired(self, now: float) -> list[tuple[Hashable, _Window]]:
        """Windows that closed (oldest first, under the lock); a few a call, so a call stays cheap."""
        out = []
        for key, window in list(self._windows.items())[:4]:
            if now - window.started < self.window:
                break
            out.append((key, self._windows.pop(key)))
        return out

    def _summarise(self, key: Hashable, window: _Window, now: float) -> None:
        if window.suppressed:
            self.write(
                f"{self.event}_repeated",
                **window.fields,
                count=window.suppressed,
                seconds=round(now - window.started, 3),
            )
