"""Which corpora are held in memory for exact search, within a budget of chunks over them all.

Pure bookkeeping (no I/O, no lock of its own): the store calls it under its lock, in the same
lock hold as the ledger change it follows, so a copy always equals its corpus's complete
documents.  A corpus that did not fit when last tried is not tried again until space is freed.
Each corpus has a *generation*, bumped whenever its set of complete documents changes, so a
copy loaded without the lock (reading ChromaDB takes seconds) is installed only if nothing
changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from hearthnet.services.rag.search.exact import ExactIndex

__all__ = ["EXACT_MAX_CHUNKS", "InMemoryCopies"]

EXACT_MAX_CHUNKS = 30_000
"""Chunks, summed over corpora, searched exactly in memory (about 2.5 KB each: vector, text,
metadata)."""


class InMemoryCopies:
    """The exact copies of a store's corpora (see the module docstring)."""

    def __init__(self, budget: int = EXACT_MAX_CHUNKS) -> None:
        self.budget = max(0, budget)
        self.indexes: dict[str, ExactIndex] = {}
        self.too_big: set[str] = set()
        """Corpora that did not fit the budget when last tried (tried again after a delete)."""
        self.loading: set[str] = set()
        """Corpora whose copy a query is loading now (one load per corpus at a time)."""
        self._generation: dict[str, int] = {}

    def get(self, name: str) -> ExactIndex | None:
        return self.indexes.get(name)

    def generation(self, name: str) -> int:
        return self._generation.get(name, 0)

    def changed(self, name: str) -> None:
        """The corpus's complete documents changed: a load that started before is not installed."""
        # Bumped, never reset: a load of an older state still running must not be installed.
        self._generation[name] = self._generation.get(name, 0) + 1

    def used(self, besides: str | None = None) -> int:
        return sum(len(ix) for name, ix in self.indexes.items() if name != besides)

    def fits(self, name: str, chunks: int) -> bool:
        """Whether ``chunks`` of ``name`` fit beside the other corpora's copies."""
        return chunks <= self.budget - self.used(besides=name)

    def should_load(self, name: str) -> bool:
        """Whether a query should load ``name``'s copy now (none held, none loading, worth a try)."""
        return (
            name not in self.indexes
            and name not in self.too_big
            and self.budget > 0
            and name not in self.loading
        )

    def created(self, name: str, dim: int) -> None:
        """A new corpus: its copy starts empty and grows with each document, so no query after a
        bulk ingest has to load it from ChromaDB."""
        if self.budget > 0:
            self.indexes[name] = ExactIndex(dim)
            self.changed(name)

    def forget(self, name: str) -> None:
        """The corpus is gone (or is being rebuilt): drop its copy."""
        self.indexes.pop(name, None)
        self.too_big.discard(name)
        self.changed(name)

    def added(
        self,
        name: str,
        ids: Sequence[str],
        vectors: np.ndarray,
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
    ) -> None:
        """A document completed: extend the copy, or drop it if it grew past the budget."""
        index = self.indexes.get(name)
        if index is None:
            return
        if self.used() + len(ids) > self.budget:
            del self.indexes[name]  # grew past the budget: HNSW from now on
            self.too_big.add(name)
            return
        index.add(ids, vectors, texts, metadatas)

    def deleting(self, name: str, doc_cid: str) -> None:
        """A document starts being deleted: it leaves the copy now; space is freed for every corpus."""
        self.changed(name)
        index = self.indexes.get(name)
        if index is not None:
            index.remove_doc(doc_cid)
        self.too_big.clear()

    def updated(self, name: str, doc_cid: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """A document's metadata changed (``change`` makes each chunk's new metadata of its old):
        the copy follows; a load that started before is not installed."""
        self.changed(name)
        index = self.indexes.get(name)
        if index is not None:
            index.update_doc(doc_cid, change)

    def rebuilt(
        self,
        name: str,
        dim: int,
        ids: Sequence[str],
        vectors: Sequence[np.ndarray],
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
    ) -> None:
        """The corpus was replaced by a reindex: a copy of the new one, straight from memory, if it fits."""
        self.forget(name)
        if 0 < len(ids) and self.fits(name, len(ids)):
            index = ExactIndex(dim)
            index.add(ids, np.concatenate(list(vectors)), texts, metadatas)
            self.indexes[name] = index

    def install(self, name: str, index: ExactIndex) -> ExactIndex | None:
        """Keep a loaded copy if it still fits beside the others (else the corpus is too big)."""
        if not self.fits(name, len(index)):
            self.too_big.add(name)
            return None
        self.indexes[name] = index
        return index

    def clear(self) -> None:
        self.indexes.clear()
