"""How a hybrid query ranks the candidates of its two legs: a convex combination of scores
(the method and its tuning on SciFact's train queries are in ``specs/rag.md``).

``score = 0.75 * cosine + 0.25 * bm25 / best bm25``: the dense leg's cosine as it is (every
candidate has one: a chunk only the keyword leg found gets its cosine computed), the keyword
leg's BM25 divided by the best BM25 of the query (0 for a chunk it did not find).  The cosine is
not rescaled per query, so scores of corpora of one model stay comparable (the composer merges
them by score) and a weak chunk of a small corpus is not lifted to the top.  Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DENSE_WEIGHT", "HYBRID_CANDIDATES", "fuse"]

DENSE_WEIGHT = 0.75
"""The dense leg's weight (the keyword leg has the rest), tuned on SciFact's train queries."""
HYBRID_CANDIDATES = 40
"""Candidates each leg brings at least (``k`` if more)."""


def fuse(
    cosine: Mapping[str, float], bm25: Mapping[str, float], *, dense_weight: float = DENSE_WEIGHT
) -> list[tuple[str, float]]:
    """Every candidate of ``cosine`` (all of them, the keyword leg's included) with its fused score
    (within ``[-dense_weight, 1]`` for cosines in [-1, 1]), best first; ties by the higher cosine,
    then by id (deterministic).

    ``bm25`` holds the keyword leg's scores (higher is better, ids it did not find are absent);
    an id in ``bm25`` but not in ``cosine`` is ignored (its vector was not found: not a hit).
    """
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError("dense_weight must be within [0, 1]")
    best = max((b for i, b in bm25.items() if i in cosine and b > 0), default=0.0)
    fused: list[tuple[str, float, float]] = []
    for chunk_id, cos in cosine.items():
        b = bm25.get(chunk_id, 0.0)
        keyword = b / best if best > 0 and b > 0 else 0.0
        fused.append((chunk_id, dense_weight * cos + (1.0 - dense_weight) * keyword, cos))
    fused.sort(key=lambda t: (-t[1], -t[2], t[0]))
    return [(chunk_id, score) for chunk_id, score, _ in fused]
