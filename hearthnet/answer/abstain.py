"""When the documents do not say: nothing retrieved is close enough to the question to answer it.

The bar is ``[answer] abstain_threshold``, a cosine of the question to its best chunk (the
retrieval's similarity, not a hybrid or reranker score), calibrated on answerable and
unanswerable questions over the shared PDFs (``bench/answer.py``, ``specs/answer.md``).  Below it
the answer is :data:`DOCUMENTS_DO_NOT_SAY`, generated and extractive alike (no model is asked),
and the closest passages come as sources marked ``nearest``: offered to read, not an answer.
Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hearthnet.answer.citations import source_of
from hearthnet.answer.hits import Hit

__all__ = ["DOCUMENTS_DO_NOT_SAY", "NEAREST", "abstains", "abstention", "best_cosine", "nearest_sources"]

DOCUMENTS_DO_NOT_SAY = "The documents do not say: no passage is close enough to the question to answer it."


def abstention(unsearched: int) -> str:
    """What an abstaining answer says: the documents do not say, or, when ``unsearched`` corpora
    could not be searched (their hosts away, their queries failed, past the most asked), that
    the documents searched do not: those others might."""
    if unsearched <= 0:
        return DOCUMENTS_DO_NOT_SAY
    corpora = "1 corpus" if unsearched == 1 else f"{unsearched} corpora"
    return (
        "The documents that could be searched do not say: no passage is close enough to the "
        f"question to answer it ({corpora} could not be searched)."
    )


NEAREST = 3
"""Passages offered as "nearest, not an answer" with an abstention."""


def best_cosine(hits: Sequence[Hit]) -> float | None:
    return max((h.cosine for h in hits), default=None)


def abstains(rag: str, hits: Sequence[Hit], bar: float) -> bool:
    """Retrieval answered (``used``/``partial``) and no chunk reaches ``bar``."""
    if rag not in ("used", "partial"):
        return False
    best = best_cosine(hits)
    return best is None or best < bar


def nearest_sources(hits: Sequence[Hit], n: int = NEAREST) -> list[dict[str, Any]]:
    """The ``n`` closest distinct chunks, best first, as sources marked ``nearest`` (none cited)."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for hit in sorted(hits, key=lambda h: (-h.cosine, h.corpus, h.chunk_id)):
        if hit.chunk_id in seen:
            continue
        seen.add(hit.chunk_id)
        out.append({**source_of(hit, cited=False), "nearest": True})
        if len(out) >= n:
            break
    return out
