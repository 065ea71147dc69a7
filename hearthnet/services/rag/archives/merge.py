"""One ranking from the answers of several archives (:func:`hearthnet.contracts.fusion.fuse`).

Archives embedded with the same model are merged by score (the seeds sort by distance), across
models by reciprocal rank fusion; an entry met twice (the same segment of the same collection,
or the same text in two archives) is kept once, with its best score; ties go to the archive
named first in the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hearthnet.contracts.fusion import RRF_K, HitKeys, fuse
from hearthnet.contracts.fusion import Ranked as _Ranked
from hearthnet.services.rag.results import Hit

__all__ = ["RRF_K", "ArchiveHit", "Ranked", "merge_hits"]


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


def _order(hit: ArchiveHit) -> tuple[float, int, int, str]:
    return (-hit.hit.score, hit.source, hit.rank, hit.hit.chunk_id)


HIT_KEYS: HitKeys[ArchiveHit] = HitKeys(
    model=lambda h: h.embedding_model,
    score=lambda h: h.hit.score,
    identity=lambda h: h.identity,
    text=lambda h: h.hit.text,
    order=_order,
    tie=lambda h: (h.source, h.rank, h.hit.chunk_id),
)

Ranked = _Ranked[ArchiveHit]
"""A merged archive hit; ``fused`` orders the list (the similarity, or the RRF sum)."""


def merge_hits(hits: Sequence[ArchiveHit]) -> tuple[list[Ranked], str]:
    """One ranking of ``hits`` and how it was made: ``"score"`` (one model) or ``"rrf"``."""
    return fuse(hits, HIT_KEYS)
