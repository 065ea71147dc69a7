"""Merging the answers of several corpora into one ranking.

Similarities of one embedding model are comparable, so corpora embedded with the
same model are merged by score.  Across models they are not, so each model's
merged list is one input to reciprocal rank fusion (``1 / (RRF_K + rank)``
summed over the lists an item appears in).  A chunk that appears twice (the
same chunk id, or the same text after whitespace is collapsed: one document
held in two corpora) is kept once, with its best score.  Pure functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hearthnet.answer.hits import Hit

__all__ = ["RRF_K", "Ranked", "merge", "text_key"]

T = TypeVar("T")

RRF_K = 60
"""The usual constant of reciprocal rank fusion: damps the weight of the very first ranks."""


@dataclass(frozen=True)
class Ranked:
    """A merged hit: ``fused`` orders the final list (the similarity, or the RRF sum)."""

    hit: Hit
    fused: float


def text_key(text: str) -> str:
    """Two chunks with this same key hold the same text."""
    return " ".join(text.split()).casefold()


def _order(hit: Hit) -> tuple[float, str, str, str, str]:
    """Best score first; ties broken by the hit's fields, so the order never depends on arrival."""
    return (-hit.score, hit.chunk_id, hit.corpus, hit.embedding_model, hit.text)


def _once(items: Iterable[T], hit_of: Callable[[T], Hit]) -> list[T]:
    """``items`` (already in order) without any whose chunk id or text came earlier."""
    seen_ids: set[str] = set()
    seen_texts: set[str] = set()
    out: list[T] = []
    for item in items:
        hit = hit_of(item)
        key = text_key(hit.text)
        if hit.chunk_id in seen_ids or (key and key in seen_texts):
            continue
        seen_ids.add(hit.chunk_id)
        if key:
            seen_texts.add(key)
        out.append(item)
    return out


def _dedupe(hits: Iterable[Hit]) -> list[Hit]:
    """Best-first, each chunk (by id or by text) once."""
    return _once(sorted(hits, key=_order), lambda h: h)


def merge(hits: Sequence[Hit]) -> tuple[list[Ranked], str]:
    """One ranking of ``hits`` and how it was made: ``"score"`` (one model) or ``"rrf"``."""
    by_model: dict[str, list[Hit]] = {}
    for hit in hits:
        by_model.setdefault(hit.embedding_model, []).append(hit)
    if len(by_model) <= 1:
        return [Ranked(h, h.score) for h in _dedupe(hits)], "score"
    # entry -> model -> its best reciprocal rank in that model's list (each list counts once)
    votes: dict[str, dict[str, float]] = {}
    best: dict[str, Hit] = {}
    alias: dict[str, str] = {}  # chunk id or text key -> the entry it was fused into
    for model in sorted(by_model):
        for rank, hit in enumerate(_dedupe(by_model[model]), start=1):
            key = text_key(hit.text)
            entry = alias.get(hit.chunk_id) or (alias.get(key) if key else None) or hit.chunk_id
            alias.setdefault(hit.chunk_id, entry)
            if key:
                alias.setdefault(key, entry)
            mine = votes.setdefault(entry, {})
            mine[model] = max(mine.get(model, 0.0), 1.0 / (RRF_K + rank))
            if entry not in best or _order(hit) < _order(best[entry]):
                best[entry] = hit
    ranked = [Ranked(best[e], sum(v.values())) for e, v in votes.items()]
    ranked.sort(key=lambda r: (-r.fused, *_order(r.hit)))
    return _once(ranked, lambda r: r.hit), "rrf"
