"""One ranking from the answers of several archives.

Similarities of one embedding model are comparable, so archives embedded with
the same model are merged by score (the seeds sort by distance).  Across
models they are not: each model's list is one input to reciprocal rank fusion
(``1 / (RRF_K + rank)`` summed over the lists an entry appears in).  An entry
met twice (the same segment of the same collection, or the same text in two
archives) is kept once, with its best score.  Pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hearthnet.services.rag.corpus import Hit

__all__ = ["RRF_K", "ArchiveHit", "Ranked", "merge_hits"]

RRF_K = 60
"""The usual constant of reciprocal rank fusion: damps the weight of the very first ranks."""


@dataclass(frozen=True)
class ArchiveHit:
    """A hit and the archive that answered it."""

    archive: str
    """The archive's human name (what the tool's text shows)."""
    collection_name: str
    server: str
    """The ChromaDB server, normalised."""
    embedding_model: str
    hit: Hit
    rank: int
    """1-based rank in its archive's answer."""
    source: int = 0
    """Position of its archive in the request: breaks ties, so the order never depends on arrival."""

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.server, self.collection_name, self.hit.chunk_id)


@dataclass(frozen=True)
class Ranked:
    """A merged hit; ``fused`` orders the list (the similarity, or the RRF sum)."""

    hit: ArchiveHit
    fused: float


def _text_key(hit: ArchiveHit) -> str:
    return " ".join((hit.hit.text or "").split()).casefold()


def _order(hit: ArchiveHit) -> tuple[float, int, int, str]:
    return (-hit.hit.score, hit.source, hit.rank, hit.hit.chunk_id)


def _once(hits: Iterable[ArchiveHit]) -> list[ArchiveHit]:
    """``hits`` (already in order) without any whose segment or text came earlier."""
    seen: set[tuple[str, str, str]] = set()
    texts: set[str] = set()
    out = []
    for hit in hits:
        key = _text_key(hit)
        if hit.identity in seen or (key and key in texts):
            continue
        seen.add(hit.identity)
        if key:
            texts.add(key)
        out.append(hit)
    return out


def merge_hits(hits: Sequence[ArchiveHit]) -> tuple[list[Ranked], str]:
    """One ranking of ``hits`` and how it was made: ``"score"`` (one model) or ``"rrf"``."""
    by_model: dict[str, list[ArchiveHit]] = {}
    for hit in hits:
        by_model.setdefault(hit.embedding_model, []).append(hit)
    if len(by_model) <= 1:
        return [Ranked(h, h.hit.score) for h in _once(sorted(hits, key=_order))], "score"
    fused: dict[int, float] = {}
    best: dict[int, ArchiveHit] = {}
    entry_of: dict[object, int] = {}  # segment identity or text key -> its entry
    for model in sorted(by_model):
        for rank, hit in enumerate(_once(sorted(by_model[model], key=_order)), start=1):
            key = _text_key(hit)
            entry = entry_of.get(hit.identity)
            if entry is None and key:
                entry = entry_of.get(key)
            if entry is None:
                entry = len(best)
                best[entry] = hit
            entry_of.setdefault(hit.identity, entry)
            if key:
                entry_of.setdefault(key, entry)
            fused[entry] = fused.get(entry, 0.0) + 1.0 / (RRF_K + rank)
            if _order(hit) < _order(best[entry]):
                best[entry] = hit
    ranked = [Ranked(best[e], fused[e]) for e in best]
    ranked.sort(key=lambda r: (-r.fused, r.hit.source, r.hit.rank, r.hit.hit.chunk_id))
    return ranked, "rrf"
