"""Merging the answers of several corpora into one ranking (:func:`hearthnet.contracts.fusion.fuse`):
by score within one embedding model, by reciprocal rank fusion across models; a chunk met twice
(its id, or its text: one document held in two corpora) is kept once, with its best score."""

from __future__ import annotations

from collections.abc import Sequence

from hearthnet.answer.hits import Hit
from hearthnet.contracts.fusion import HitKeys, Ranked, fuse

__all__ = ["HIT_KEYS", "merge"]


def _order(hit: Hit) -> tuple[float, str, str, str, str]:
    """Best score first; ties broken by the hit's fields, so the order never depends on arrival."""
    return (-hit.score, hit.chunk_id, hit.corpus, hit.embedding_model, hit.text)


HIT_KEYS: HitKeys[Hit] = HitKeys(
    model=lambda h: h.embedding_model,
    score=lambda h: h.score,
    identity=lambda h: h.chunk_id,
    text=lambda h: h.text,
    order=_order,
)


def merge(hits: Sequence[Hit]) -> tuple[list[Ranked[Hit]], str]:
    """One ranking of ``hits`` and how it was made: ``"score"`` (one model) or ``"rrf"``."""
    return fuse(hits, HIT_KEYS)
