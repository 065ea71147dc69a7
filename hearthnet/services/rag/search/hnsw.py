"""Search through ChromaDB's HNSW index, for corpora too big to hold in memory.

Only chunks of documents complete in the ledger are answered: ChromaDB is queried without the
store's lock, so a document may start or fail to be written meanwhile; documents known not to
be complete are excluded from the query, and every hit is checked against the ledger afterwards
(``complete_only``) and against the filter with :func:`~.filters.compile_where`, which defines
it.  Too few hits left: ask for more, up to a bound.  ChromaDB's own errors pass through: the
store converts them at its boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hearthnet.services.rag.results import Hit
from hearthnet.services.rag.search.filters import chroma_where, compile_where

__all__ = ["MAX_RECHECKED", "OVERFETCH_FACTOR", "OVERFETCH_MIN", "hnsw_search", "scored"]

MAX_RECHECKED = 2048
"""Most candidates one HNSW query re-checks against the exact filter and the ledger."""
OVERFETCH_FACTOR = 5
OVERFETCH_MIN = 50
"""A filtered query first looks at this many nearest chunks unfiltered (:func:`_overfetch_then_filter`)."""

CompleteOnly = Callable[[list[Hit]], list[Hit]]
"""The hits whose document is complete in the ledger now."""


def scored(res: Mapping[str, Any], include_text: bool) -> list[Hit]:
    """A ChromaDB query answer as hits; the score is ``1 - cosine distance``."""
    ids = res["ids"][0]
    metas = (res.get("metadatas") or [[{}] * len(ids)])[0]
    dists = (res.get("distances") or [[1.0] * len(ids)])[0]
    texts = res["documents"][0] if include_text and res.get("documents") else [None] * len(ids)
    return [
        Hit(chunk_id=i, text=t, metadata=dict(m or {}), score=1.0 - float(d))
        for i, t, m, d in zip(ids, texts, metas, dists, strict=True)
    ]


def hnsw_search(
    col: Any,
    vec: np.ndarray,
    k: int,
    clause: Mapping[str, Any] | None,
    include_text: bool,
    *,
    hidden: set[str],
    complete: int,
    stored: int,
    complete_only: CompleteOnly,
) -> list[Hit]:
    """The ``k`` best hits of ``col`` matching ``clause``, of complete documents only.

    ``hidden``: documents known not to be complete; ``complete`` and ``stored``: chunks of the
    complete documents and of all documents the ledger has.
    """
    if not complete:
        return []
    if clause is not None:
        hits = _overfetch_then_filter(col, vec, k, clause, include_text, complete, complete_only)
        if hits is not None:
            return hits
    where = None if clause is None else chroma_where(clause)
    if hidden:
        hide: dict[str, Any] = {"doc_cid": {"$nin": sorted(hidden)}}
        where = hide if where is None else {"$and": [where, hide]}
    include = ["metadatas", "distances", *(["documents"] if include_text else [])]
    # Hits may still fail the exact check (a widened clause, a document not complete):
    # ask for more, but never for more than MAX_RECHECKED candidates in all, so that
    # one query cannot hold a store thread for seconds (it then returns fewer than k).
    n, limit = k, min(max(k, stored), max(k, MAX_RECHECKED))
    matches = None if clause is None else compile_where(clause)
    while True:
        res = col.query(query_embeddings=[vec], n_results=n, where=where, include=include)
        got = scored(res, include_text)
        matching = [h for h in got if matches is None or matches(h.metadata)]
        hits = complete_only(matching)
        if len(hits) >= k or len(got) < n or n >= limit:
            return hits[:k]
        n = min(n * 4, limit)


def _overfetch_then_filter(
    col: Any,
    vec: np.ndarray,
    k: int,
    clause: Mapping[str, Any],
    include_text: bool,
    total: int,
    complete_only: CompleteOnly,
) -> list[Hit] | None:
    """Filtered search without ChromaDB's pre-filter (slow at 100k: it scans metadata first).

    Take the ``OVERFETCH`` nearest chunks unfiltered and keep those matching
    the clause (of complete documents): if at least ``k`` match, they are
    exactly the filtered top-k (any closer match would be among the nearest).
    Otherwise ``None``, and the caller runs the filtered query.
    """
    n = min(max(k * OVERFETCH_FACTOR, OVERFETCH_MIN), total)
    if n <= k:
        return None
    # Metadata only: the texts of the few chunks kept are fetched afterwards.
    res = col.query(query_embeddings=[vec], n_results=n, include=["metadatas", "distances"])
    matches = compile_where(clause)
    matching = [h for h in scored(res, False) if matches(h.metadata)]
    hits = complete_only(matching)[:k]
    if len(hits) < k:
        return None
    if not include_text:
        return hits
    got = col.get(ids=[h.chunk_id for h in hits], include=["documents"])
    texts = dict(zip(got["ids"], got.get("documents") or [], strict=False))
    return [Hit(h.chunk_id, texts.get(h.chunk_id), h.metadata, h.score) for h in hits]
