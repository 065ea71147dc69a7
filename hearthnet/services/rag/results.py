"""What a search of a corpus gives back: :class:`Hit`, the one hit type of every search (the
store's exact, HNSW and keyword searches, an archive's), and :data:`Vector`, a query embedding.

Vectors come in already embedded: a search never embeds, the service does (through
``embed.text`` on the bus).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Hit", "Vector"]

Vector = Sequence[float] | npt.NDArray[np.float32]
"""One query embedding (a row of ``embed.text``'s answer, or a plain list)."""


@dataclass(frozen=True)
class Hit:
    """One search result; ``score`` is a similarity, higher is better (cosine: ``1 - distance``)."""

    chunk_id: str
    text: str | None
    """``None`` when the query asked for no text."""
    metadata: dict[str, Any]
    score: float
    similarity: float | None = None
    """The cosine to the query when ``score`` is something else (a keyword or hybrid query's
    BM25 or fused score); ``None``: ``score`` is the cosine."""
