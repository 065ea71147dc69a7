"""What the RAG service searches: a read-only :class:`Corpus` (query, info, list documents).

The local store's corpora and external archives (ChromaDB collections made by
another system) both implement it, so ``rag.query`` and ``rag.list_corpora``
treat them alike.  Vectors come in already embedded: a corpus never embeds, the
service does (through ``embed.text`` on the bus).  ``where`` is a clause
validated by :func:`hearthnet.services.rag.search.filters.build_where`; the
store's corpora are served by :class:`hearthnet.services.rag.store.LocalCorpus`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["Corpus", "CorpusInfo", "DocumentEntry", "Hit", "Vector"]

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


@dataclass(frozen=True)
class CorpusInfo:
    """What ``rag.list_corpora`` shows of a corpus; ``None`` where the corpus cannot tell."""

    name: str
    embedding_model: str
    dim: int | None
    """Vector dimension (``None``: an empty collection has none yet)."""
    chunks: int
    """Vectors held (for an archive: every segment of every layer)."""
    docs: int | None = None
    read_only: bool = False
    label: str | None = None
    """A human name ("AIS Management Standard"); the corpus name is the identifier."""
    size_bytes: int | None = None
    language_majority: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    """Kind-specific facts safe to show (an archive: collection, server, layer)."""


@dataclass(frozen=True)
class DocumentEntry:
    """One document of a corpus as ``rag.list_documents`` shows it."""

    doc_id: str
    title: str | None = None
    chunks: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Corpus(Protocol):
    """A searchable corpus; read-only ones refuse ingest, delete and reindex (``bad_request``)."""

    @property
    def name(self) -> str: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def embedding_model(self) -> str:
        """The model its vectors were made with: queries must be embedded with the same one."""
        ...

    async def query(
        self,
        vector: Vector,
        *,
        k: int,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
    ) -> list[Hit]:
        """The ``k`` most similar entries matching ``where``, best first."""
        ...

    async def info(self) -> CorpusInfo: ...

    async def list_documents(self, *, limit: int = 100, offset: int = 0) -> list[DocumentEntry]:
        """Documents in a stable order, ``offset`` skipped, at most ``limit``."""
        ...
