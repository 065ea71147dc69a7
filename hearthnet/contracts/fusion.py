"""One ranking from the answers of several corpora (or archives): by score when they share an
embedding model, by reciprocal rank fusion across models.

Similarities of one embedding model are comparable, so hits of one model are merged by score.
Across models they are not, so each model's merged list is one input to reciprocal rank
fusion (``1 / (RRF_K + rank)`` summed over the lists an entry appears in, each list counting
once).  A hit met twice (the same identity, or the same text after whitespace is collapsed and
case folded: one document held in two corpora) is kept once, with its best score.  Pure
functions, generic over the hit's type: the composer's hits and the archives' tool use them,
and so can a client that searches several corpora itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["RRF_K", "HitKeys", "Ranked", "fuse", "text_key"]

T = TypeVar("T")
H = TypeVar("H")

RRF_K = 60
"""The usual constant of reciprocal rank fusion: damps the weight of the very first ranks."""


@dataclass(frozen=True)
class Ranked(Generic[H]):
    """A merged hit: ``fused`` orders the final list (the similarity, or the RRF sum)."""

    hit: H
    fused: float


@dataclass(frozen=True)
class HitKeys(Generic[H]):
    """How :func:`fuse` reads one kind of hit."""

    model: Callable[[H], str]
    """The embedding model its score comes from."""
    score: Callable[[H], float]
    identity: Callable[[H], Hashable]
    """Two hits with one identity are one entry (a chunk id; a segment of a collection)."""
    text: Callable[[H], str | None]
    order: Callable[[H], tuple[Any, ...]]
    """Best first, ties broken by the hit's own fields: the order never depends on arrival."""
    tie: Callable[[H], tuple[Any, ...]] | None = None
    """Breaks ties of the fused value in the final list (default: ``order``)."""


def text_key(text: str | None) -> str:
    """Two chunks with this same key hold the same text."""
    return " ".join((text or "").split()).casefold()


def _once(items: Iterable[T], hit_of: Callable[[T], H], keys: HitKeys[H]) -> list[T]:
    """``items`` (already in order) without any whose identity or text came earlier."""
    seen: set[Hashable] = set()
    texts: set[str] = set()
    out: list[T] = []
    for item in items:
        hit = hit_of(item)
        key = text_key(keys.text(hit))
        identity = keys.identity(hit)
        if identity in seen or (key and key in texts):
            continue
        seen.add(identity)
        if key:
            texts.add(key)
        out.append(item)
    return out


def fuse(hits: Sequence[H], keys: HitKeys[H]) -> tuple[list[Ranked[H]], str]:
    """One ranking of ``hits`` and how it was made: ``"score"`` (one model) or ``"rrf"``."""

    def best_first(group: Iterable[H]) -> list[H]:
        return _once(sorted(group, key=keys.order), lambda h: h, keys)

    by_model: dict[str, list[H]] = {}
    for hit in hits:
        by_model.setdefault(keys.model(hit), []).append(hit)
    if len(by_model) <= 1:
        return [Ranked(h, keys.score(h)) for h in best_first(hits)], "score"
    tie = keys.tie or keys.order
    # entry -> model -> its best reciprocal rank in that model's list (each list counts once)
    votes: dict[int, dict[str, float]] = {}
    best: dict[int, H] = {}
    entry_of: dict[Hashable, int] = {}  # identity or ("text", key) -> the entry it was fused into
    for model in sorted(by_model):
        for rank, hit in enumerate(best_first(by_model[model]), start=1):
            identity, key = keys.identity(hit), text_key(keys.text(hit))
            entry = entry_of.get(identity)
            if entry is None and key:
                entry = entry_of.get(("text", key))
            if entry is None:
                entry = len(best)
                best[entry] = hit
            entry_of.setdefault(identity, entry)
            if key:
                entry_of.setdefault(("text", key), entry)
            mine = votes.setdefault(entry, {})
            mine[model] = max(mine.get(model, 0.0), 1.0 / (RRF_K + rank))
            if keys.order(hit) < keys.order(best[entry]):
                best[entry] = hit
    ranked = [Ranked(best[e], sum(v.values())) for e, v in votes.items()]
    ranked.sort(key=lambda r: (-r.fused, *tie(r.hit)))
    return _once(ranked, lambda r: r.hit, keys), "rrf"
