"""Exact cosine search over an in-memory copy of one small corpus.

For a corpus of a few thousand chunks a matrix product over every vector is
both exact and faster than ChromaDB's HNSW query plus its SQLite metadata
fetch (measured in ``specs/rag.md``).  :class:`ExactIndex` is a *read cache*:
ChromaDB stays the durable store, and :class:`~hearthnet.services.rag.store.CorpusStore`
keeps the copy equal to the corpus's complete documents (it adds a document
in the same lock hold that marks it complete, and removes one in the hold
that starts deleting it; :mod:`.memory` keeps the books).  Not thread-safe on
its own: the store's lock guards every mutation, and a query works on arrays
that mutations replace, never edit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from hearthnet.services.rag.results import Hit

__all__ = ["ExactIndex"]


@dataclass(frozen=True)
class _Snapshot:
    """One immutable generation of the index (queries keep the one they started with)."""

    ids: tuple[str, ...]
    vectors: npt.NDArray[np.float32]
    texts: tuple[str, ...]
    metadatas: tuple[dict[str, Any], ...]

    @cached_property
    def positions(self) -> dict[str, int]:
        """Each chunk id's row (made on first use, once per generation)."""
        return {chunk_id: i for i, chunk_id in enumerate(self.ids)}


def _unit_rows(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: npt.NDArray[np.float32] = (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


class ExactIndex:
    """Unit vectors, texts and metadata of one corpus; cosine top-k by brute force."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._snap = _Snapshot((), np.zeros((0, dim), dtype=np.float32), (), ())

    def __len__(self) -> int:
        return len(self._snap.ids)

    @property
    def nbytes(self) -> int:
        """Approximate memory held (vectors + texts)."""
        snap = self._snap
        return int(snap.vectors.nbytes) + sum(len(t) for t in snap.texts)

    def add(
        self,
        ids: Sequence[str],
        vectors: npt.NDArray[np.float32],
        texts: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
    ) -> None:
        if not (len(ids) == len(texts) == len(metadatas) == vectors.shape[0]):
            raise ValueError("ids, vectors, texts and metadatas must have the same length")
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors must be (n, {self.dim})")
        snap = self._snap
        self._snap = _Snapshot(
            snap.ids + tuple(ids),
            np.concatenate([snap.vectors, _unit_rows(np.asarray(vectors, dtype=np.float32))]),
            snap.texts + tuple(texts),
            snap.metadatas + tuple(dict(m) for m in metadatas),
        )

    def remove_doc(self, doc_cid: str) -> int:
        """Drop every chunk of ``doc_cid``; returns how many were dropped."""
        snap = self._snap
        keep = [i for i, m in enumerate(snap.metadatas) if m.get("doc_cid") != doc_cid]
        dropped = len(snap.ids) - len(keep)
        if dropped:
            self._snap = _Snapshot(
                tuple(snap.ids[i] for i in keep),
                snap.vectors[keep],
                tuple(snap.texts[i] for i in keep),
                tuple(snap.metadatas[i] for i in keep),
            )
        return dropped

    def update_doc(self, doc_cid: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Every chunk of ``doc_cid`` gets the metadata ``change`` makes of its own (vectors and
        texts unchanged)."""
        snap = self._snap
        metas = tuple(change(dict(m)) if m.get("doc_cid") == doc_cid else m for m in snap.metadatas)
        self._snap = _Snapshot(snap.ids, snap.vectors, snap.texts, metas)

    def chunks(
        self, ids: Sequence[str], query: npt.NDArray[np.float32], *, include_text: bool = True
    ) -> list[Hit]:
        """The chunks of ``ids`` that the copy holds, each scored by its cosine to ``query`` (ids it
        does not hold, e.g. of a document deleted meanwhile, are left out)."""
        snap = self._snap
        rows = [snap.positions[i] for i in ids if i in snap.positions]
        if not rows:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        sims = snap.vectors[rows] @ (q / max(float(np.linalg.norm(q)), 1e-12))
        return [
            Hit(snap.ids[r], snap.texts[r] if include_text else None, dict(snap.metadatas[r]), float(s))
            for r, s in zip(rows, sims, strict=True)
        ]

    def search(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        matches: Callable[[Mapping[str, Any]], bool] | None = None,
        *,
        include_text: bool = True,
    ) -> list[Hit]:
        """The ``k`` chunks most similar to ``query`` (ties broken by insertion order).

        With ``matches``, the ``k`` most similar among chunks whose metadata it
        accepts: exact, however selective the filter.  Without ``include_text``
        the hits carry no text.
        """
        snap = self._snap
        n = len(snap.ids)
        if n == 0 or k < 1:
            return []
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        q = q / max(float(np.linalg.norm(q)), 1e-12)
        sims = snap.vectors @ q
        if matches is None and k < n:
            part = np.argpartition(-sims, k - 1)[:k]
            order = part[np.lexsort((part, -sims[part]))]
        else:
            order = np.lexsort((np.arange(n), -sims))
        hits: list[Hit] = []
        for i in order:
            meta = snap.metadatas[i]
            if matches is not None and not matches(meta):
                continue
            text = snap.texts[i] if include_text else None
            hits.append(Hit(snap.ids[i], text, dict(meta), float(sims[i])))
            if len(hits) == k:
                break
        return hits
