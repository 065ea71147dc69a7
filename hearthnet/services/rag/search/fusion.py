"""How a hybrid query ranks the candidates of its two legs: a convex combination of normalised
scores (the method and its tuning on SciFact's train queries are in ``specs/rag.md``).

The dense leg's cosine is min-max normalised over all candidates (every candidate has one: a
chunk only the keyword leg found gets its cosine computed); the keyword leg's BM25 is divided by
the best BM25 of the query, and a chunk it did not find scores 0 there.  Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DENSE_WEIGHT", "HYBRID_CANDIDATES", "fuse"]

DENSE_WEIGHT = 0.6
"""The dense leg's weight (the keyword leg has the rest), tuned on SciFact's train queries."""
HYBRID_CANDIDATES = 40
"""Candidates each leg brings at least (``k`` if more)."""


def fuse(
    cosine: Mapping[str, float], bm25: Mapping[str, float], *, dense_weight: float = DENSE_WEIGHT
) -> list[tuple[str, float]]:
    """Every candidate of ``cosine`` (all of them, the keyword leg's included) with its fused score
    in [0, 1], best first; ties by the higher cosine, then by id (deterministic).

    ``bm25`` holds the keyword leg's scores (higher is better, ids it did not find are absent);
    an id in ``bm25`` but not in ``cosine`` is ignored (its vector was not found: not a hit).
    """
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError("dense_weight must be within [0, 1]")
    if not cosine:
        return []
    low, high = min(cosine.values()), max(cosine.values())
    span = high - low
    best = max((b for i, b in bm25.items() if i in cosine and b > 0), default=0.0)
    fused: list[tuple[str, float, float]] = []
    for chunk_id, cos in cosine.items():
        dense = (cos - low) / span if span > 0 else 1.0
        b = bm25.get(chunk_id, 0.0)
        keyword = b / best if best > 0 and b > 0 else 0.0
        score = dense_weight * dense + (1.0 - dense_weight) * keyword
        fused.append((chunk_id, min(1.0, max(0.0, score)), cos))
    fused.sort(key=lambda t: (-t[1], -t[2], t[0]))
    return [(chunk_id, score) for chunk_id, score, _ in fused]
