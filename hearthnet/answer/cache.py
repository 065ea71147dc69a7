"""A bounded, expiring cache of answers, dropped per corpus when its documents change.

Keyed by the question (whitespace collapsed, case folded), the session, the
sorted corpora and what else shapes the answer (model, limits).  Entries expire
``ttl`` seconds after they were stored (on an injectable clock); past
``max_entries`` the least recently used goes.  ``invalidate_corpus`` drops
every entry that drew on a corpus, ``invalidate_session`` every entry of a
session.  It stores and hands out copies, so a caller that changes an answer
it was given never changes the cache.  Not thread-safe: used from the event loop only.
"""

from __future__ import annotations

import copy
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["AnswerCache", "CacheKey", "normalise_question"]


def normalise_question(question: str) -> str:
    return " ".join(question.split()).casefold()


@dataclass(frozen=True)
class CacheKey:
    question: str
    session: str | None
    corpora: tuple[str, ...]
    options: tuple[Hashable, ...] = ()

    @classmethod
    def of(
        cls, question: str, session: str | None, corpora: list[str] | tuple[str, ...], *options: Hashable
    ) -> CacheKey:
        return cls(normalise_question(question), session, tuple(sorted(set(corpora))), tuple(options))


class AnswerCache:
    def __init__(self, *, ttl: float, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[CacheKey, tuple[float, dict[str, Any]]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: CacheKey) -> dict[str, Any] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self._clock():
            if entry is not None:
                del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return copy.deepcopy(entry[1])

    def put(self, key: CacheKey, value: dict[str, Any]) -> None:
        self._entries[key] = (self._clock() + self._ttl, copy.deepcopy(value))
        self._entries.move_to_end(key)
        now = self._clock()
        for stale in [k for k, (expires, _) in self._entries.items() if expires <= now]:
            del self._entries[stale]
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def invalidate_corpus(self, corpus: str) -> int:
        """Drop every answer that drew on ``corpus``; returns how many."""
        return self._drop(lambda k: corpus in k.corpora)

    def invalidate_session(self, session: str) -> int:
        return self._drop(lambda k: k.session == session)

    def _drop(self, match: Callable[[CacheKey], bool]) -> int:
        gone = [k for k in self._entries if match(k)]
        for k in gone:
            del self._entries[k]
        return len(gone)
