"""One corpus of the store as ``rag.query`` searches it: dense, keyword or hybrid, on the event
loop or in a read thread as :mod:`hearthnet.services.rag.search.choice` decides."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.results import Hit, Vector
from hearthnet.services.rag.search.choice import search_here_or_in_thread
from hearthnet.services.rag.search.fulltext import KeywordRow
from hearthnet.services.rag.store.store import CorpusStore

__all__ = ["KeywordLeg", "LocalCorpus"]


@dataclass(frozen=True)
class KeywordLeg:
    """A query's keyword leg, run ahead; ``rows`` is ``None`` when the corpus has no keyword index."""

    rows: list[KeywordRow] | None


class LocalCorpus:
    """Corpus ``name`` of ``store``, read in ``threads`` (never on the event loop, but for a small
    in-memory search)."""

    def __init__(
        self, store: CorpusStore, name: str, threads: WorkerThreads, *, embedding_model: str
    ) -> None:
        self._store = store
        self._name = name
        self._threads = threads
        self._model = embedding_model

    @property
    def name(self) -> str:
        return self._name

    @property
    def embedding_model(self) -> str:
        return self._model

    async def search(
        self,
        vector: Vector,
        *,
        k: int,
        where: Mapping[str, Any] | None,
        include_text: bool,
        text: str = "",
        mode: str = "dense",
        leg: KeywordLeg | None = None,
    ) -> tuple[list[Hit], frozenset[str] | None, str]:
        """The ``k`` best hits for ``vector`` (and ``text``) matching ``where``; with a filter, the
        metadata keys the corpus's documents have (``None`` without one, or if unknown: what a
        filter naming no such key is warned about); and the mode used: ``keyword`` and ``hybrid``
        rank by ``text``'s BM25 or by both fused (in a read thread), or fall back to ``dense``
        while the corpus has no keyword index yet.  ``leg``: the keyword leg, started by
        :meth:`keyword_leg` before the vector was there."""
        store, name = self._store, self._name
        vec = np.asarray(vector, dtype=np.float32)

        def here(max_floats: int) -> tuple[list[Hit], frozenset[str] | None, str] | None:
            if mode != "dense":
                if leg is None or leg.rows is None or where:
                    return None
                words = store.words_in_memory(
                    name, vec, leg.rows, k=k, mode=mode, include_text=include_text, max_floats=max_floats
                )
                return None if words is None else (words, None, mode)
            found = store.query_in_memory(
                name, vec, k=k, where=where, include_text=include_text, max_floats=max_floats
            )
            return None if found is None else (found, None, "dense")

        def in_thread() -> tuple[list[Hit], frozenset[str] | None, str]:
            rows = None
            if mode != "dense":
                rows = (
                    leg.rows
                    if leg is not None
                    else store.keyword_leg(name, text, k=k, mode=mode, where=where)
                )
            used = mode if rows is not None else "dense"
            if used == "dense":
                found = store.query(name, vec, k=k, where=where, include_text=include_text)
            else:
                found = store.query_words(
                    name, vec, text, k=k, mode=used, where=where, include_text=include_text, rows=rows
                )
            return found, store.metadata_keys(name) if where else None, used

        return await search_here_or_in_thread(here, in_thread, self._threads)

    async def keyword_leg(
        self, text: str, *, k: int, mode: str, where: Mapping[str, Any] | None
    ) -> KeywordLeg:
        """The keyword leg of a ``keyword`` or ``hybrid`` query, in a read thread: it needs no
        vector, so the service runs it while the query is embedded."""
        store, name = self._store, self._name

        def rows() -> list[KeywordRow] | None:
            return store.keyword_leg(name, text, k=k, mode=mode, where=where)

        found: list[KeywordRow] | None = await run_blocking(rows, limiter=self._threads)
        return KeywordLeg(found)
