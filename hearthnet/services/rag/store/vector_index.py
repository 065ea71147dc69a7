"""The store's vector index (a part :class:`~hearthnet.services.rag.store.store.CorpusStore`
composes): dense queries from the corpus's in-memory copy when it has one (loading it on first use
if it fits), else through ChromaDB's HNSW index; only complete documents either way.  Also the
reads of stored chunks by id or filter (``rag.get``) and of a document's chunks with their vectors
(``rag.export``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.services.rag.results import Hit
from hearthnet.services.rag.search.exact import ExactIndex
from hearthnet.services.rag.search.filters import build_where, chroma_where, compile_where
from hearthnet.services.rag.search.hnsw import hnsw_search
from hearthnet.services.rag.store.chroma import CollectionGone, Collections, chroma_errors
from hearthnet.services.rag.store.core import StoreCore

__all__ = ["ChunkRow", "VectorIndex", "query_vector"]

_log = structlog.get_logger("hearthnet.rag.store")


def query_vector(embedding: np.ndarray, dim: int, k: int) -> np.ndarray:
    """``embedding`` as a flat float32 vector of the corpus's ``dim``; ``BadRequest`` for a wrong
    size, a value that is not finite, or ``k`` below 1."""
    vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
    if vec.shape != (dim,) or not np.isfinite(vec).all():
        raise BadRequest(f"query embedding must be {dim} finite floats")
    if k < 1:
        raise BadRequest("k must be at least 1")
    return vec


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk as ``rag.get`` reads it (text and vector only when asked for)."""

    chunk_id: str
    metadata: dict[str, Any]
    text: str | None
    embedding: list[float] | None


@dataclass(kw_only=True, eq=False)
class VectorIndex:
    """Dense queries and chunk reads of the store's corpora.

    Given what it uses of the store: its ``core`` and ``handles`` (the collection handles held:
    ``known`` and ``forget``).  Blocking, thread-safe.
    """

    core: StoreCore
    handles: Collections

    def query(
        self,
        name: str,
        embedding: np.ndarray,
        *,
        k: int,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
    ) -> list[Hit]:
        """The ``k`` most similar chunks; ``where`` is a ``rag.query`` filter (see :func:`build_where`)."""
        try:
            return self._query(name, embedding, k=k, where=where, include_text=include_text)
        except CollectionGone:
            self.handles.forget(name)  # then the corpus as it is now: rebuilt, or gone (NotFound)
            return self._query(name, embedding, k=k, where=where, include_text=include_text)

    def query_in_memory(
        self,
        name: str,
        embedding: np.ndarray,
        *,
        k: int,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
        max_floats: int,
    ) -> list[Hit] | None:
        """:meth:`query`'s answer if it can be given at once from the in-memory copy, else ``None``.

        For the event loop (no thread hop): never waits for the store lock (a
        write holding it gives ``None``), never reads ChromaDB or the ledger,
        and searches only a copy of at most ``max_floats`` vector components
        (the matrix product is most of the cost).  ``None`` too when the corpus
        has no copy or no known collection handle, and for a filtered query (its
        walk down the ranking is Python, as long as the filter is selective):
        :meth:`query` then decides.
        """
        index = None if where else self.copy_at_once(name, max_floats)
        if index is None:
            return None
        return index.search(query_vector(embedding, index.dim, k), k, include_text=include_text)

    def copy_at_once(self, name: str, max_floats: int) -> ExactIndex | None:
        """The corpus's in-memory copy if the event loop may search it now: the store lock free
        (never waited for), the collection's handle known, at most ``max_floats`` components."""
        if not self.core.lock.acquire(blocking=False):
            return None
        try:
            index = self.core.memory.get(name)
            known = self.handles.known(name)
        finally:
            self.core.lock.release()
        if index is None or not known or len(index) * index.dim > max_floats:
            return None
        return index

    def _query(
        self,
        name: str,
        embedding: np.ndarray,
        *,
        k: int,
        where: Mapping[str, Any] | None,
        include_text: bool,
    ) -> list[Hit]:
        col = self.core.collection(name)
        with self.core.lock:
            cached = self.core.memory.get(name)  # kept with the corpus's row: no ledger read then
            row = None if cached is not None else self.core.ledger.corpus(name)
        if cached is not None:
            dim = cached.dim
        elif row is None:
            raise NotFound(f"corpus {name!r} does not exist")
        else:
            dim = row.dim
        vec = query_vector(embedding, dim, k)
        clause = build_where(where) if where else None
        index = self.exact_index(name, col)
        if index is not None:
            matches = None if clause is None else compile_where(clause)
            return index.search(vec, k, matches, include_text=include_text)
        with self.core.lock:
            hidden = self.core.writing(name) | self.core.ledger.not_complete(name)
            complete, stored = self.core.ledger.chunk_counts(name)
        with chroma_errors("query"):
            return hnsw_search(
                col,
                vec,
                k,
                clause,
                include_text,
                hidden=hidden,
                complete=complete,
                stored=stored,
                complete_only=lambda hits: self.complete_only(name, hits),
            )

    def complete_only(self, name: str, hits: list[Hit]) -> list[Hit]:
        """The hits whose document is complete in the ledger now."""
        with self.core.lock:
            complete = self.core.ledger.complete_among(name, [str(h.metadata.get("doc_cid")) for h in hits])
        return [h for h in hits if h.metadata.get("doc_cid") in complete]

    def exact_index(self, name: str, col: Any) -> ExactIndex | None:
        """The corpus's exact copy, loading it if the corpus fits the budget; else ``None``.

        The load reads ChromaDB without holding the store lock (seconds for a large
        corpus), then installs the copy only if no document of the corpus completed or
        started deleting meanwhile; otherwise this query uses HNSW and a later one loads
        again.  One load per corpus at a time: queries arriving meanwhile use HNSW instead
        of loading (and holding in memory) a copy each.
        """
        with self.core.lock:
            index = self.core.memory.get(name)
            if index is not None or not self.core.memory.should_load(name):
                return index
            self.core.memory.loading.add(name)
        try:
            return self._load_exact(name, col)
        finally:
            with self.core.lock:
                self.core.memory.loading.discard(name)

    def _load_exact(self, name: str, col: Any) -> ExactIndex | None:
        """:meth:`exact_index`'s load (the caller marked ``name`` as loading)."""
        with self.core.lock:
            row = self.core.ledger.corpus(name)
            if row is None:
                return None
            complete = self.core.ledger.complete_chunks(name)
            total = sum(complete.values())
            if not self.core.memory.fits(name, total):
                self.core.memory.too_big.add(name)
                return None
            generation = self.core.memory.generation(name)
        # Chunks of documents being written now are in Chroma but not complete: skipped.
        ids: list[str] = []
        vectors: list[np.ndarray] = []
        texts: list[str] = []
        metas: list[Mapping[str, Any]] = []
        offset = 0
        with chroma_errors("load corpus for exact search"):
            while True:
                got = col.get(
                    include=["embeddings", "documents", "metadatas"], limit=self.core.batch, offset=offset
                )
                if not got["ids"]:
                    break
                offset += len(got["ids"])
                keep = [i for i, m in enumerate(got["metadatas"]) if (m or {}).get("doc_cid") in complete]
                ids += [got["ids"][i] for i in keep]
                vectors.append(np.asarray(got["embeddings"], dtype=np.float32)[keep])
                texts += [got["documents"][i] or "" for i in keep]
                metas += [got["metadatas"][i] or {} for i in keep]
        index = ExactIndex(row.dim)
        if ids:  # one copy into the index, not one growing concatenation per page
            index.add(ids, np.concatenate(vectors), texts, metas)
        with self.core.lock:
            if self.core.memory.generation(name) != generation or self.core.memory.get(name) is not None:
                return self.core.memory.get(name)  # changed meanwhile: not this copy
            if len(index) != total:
                # The ledger and Chroma disagree (should not happen): trust neither copy, use HNSW.
                _log.warning("rag_exact_index_mismatch", corpus=name, ledger=total, loaded=len(index))
                self.core.memory.too_big.add(name)
                return None
            if self.core.memory.install(name, index) is None:
                return None
        _log.info("rag_exact_index_loaded", corpus=name, chunks=total, bytes=index.nbytes)
        return index

    def document_chunks(
        self, name: str, doc_cid: str
    ) -> tuple[list[str], list[str], list[dict[str, Any]], np.ndarray] | None:
        """A complete document's chunk ids, texts, metadata and vectors, in chunk order (``chunk_index``,
        then id), as stored; ``None`` if the corpus does not hold it complete (blocking)."""
        col = self.core.collection(name)
        with self.core.lock:
            if doc_cid not in self.core.ledger.complete_among(name, [doc_cid]):
                return None
        with chroma_errors("read a document's chunks"):
            got = col.get(where={"doc_cid": doc_cid}, include=["embeddings", "documents", "metadatas"])
        metas = [dict(m or {}) for m in got["metadatas"]]
        order = sorted(
            range(len(got["ids"])), key=lambda i: (int(metas[i].get("chunk_index", 0)), got["ids"][i])
        )
        vectors = np.asarray(got["embeddings"], dtype=np.float32)
        return (
            [str(got["ids"][i]) for i in order],
            [str(got["documents"][i] or "") for i in order],
            [metas[i] for i in order],
            vectors[order] if len(order) else vectors.reshape(0, 0),
        )

    def warm_exact(self, names: Sequence[str]) -> list[str]:
        """Load the exact copy of each corpus of ``names`` that fits the budget (blocking); returns
        those loaded.

        A corpus that cannot be loaded is logged and left to HNSW: it never stops the others.
        """
        loaded = []
        for name in names:
            try:
                if self.exact_index(name, self.core.collection(name)) is not None:
                    loaded.append(name)
            except BusError as exc:
                _log.warning("rag_exact_warm_failed", corpus=name, code=exc.code, error=exc.message)
        return loaded

    def get_chunks(
        self,
        name: str,
        *,
        ids: Sequence[str] | None,
        where: Mapping[str, Any] | None,
        contains: str | None,
        limit: int,
        offset: int,
        include_text: bool,
        include_embeddings: bool,
    ) -> list[ChunkRow]:
        """Chunks of complete documents in the store's order: by ``ids`` and/or a ``rag.query`` filter
        (``where``) and/or a substring of their text (``contains``), ``offset`` of them skipped.

        The filter goes to ChromaDB as :func:`chroma_where` (a widened clause) and each row is
        checked against its exact meaning after; a row a widened comparison let in (rare) is left
        out of the page rather than replaced, so such a page may hold fewer than ``limit``.
        """
        col = self.core.collection(name)
        clause = build_where(where) if where else None
        parts: list[dict[str, Any]] = []
        if clause is not None:
            widened = chroma_where(clause)
            if widened is not None:
                parts.append(widened)
        with self.core.lock:
            hidden = self.core.writing(name) | self.core.ledger.not_complete(name)
        if hidden:
            parts.append({"doc_cid": {"$nin": sorted(hidden)}})
        chroma_clause = None if not parts else parts[0] if len(parts) == 1 else {"$and": parts}
        include = [
            "metadatas",
            *(["documents"] if include_text else []),
            *(["embeddings"] if include_embeddings else []),
        ]
        with chroma_errors("get"):
            res = col.get(
                ids=list(ids) if ids else None,
                where=chroma_clause,
                where_document={"$contains": contains} if contains else None,
                limit=limit,
                offset=offset,
                include=include,
            )
        matches = None if clause is None else compile_where(clause)
        rows: list[ChunkRow] = []
        metas = res.get("metadatas") or [{}] * len(res["ids"])
        texts = res.get("documents") if include_text else None
        vectors = res.get("embeddings") if include_embeddings else None
        for i, chunk_id in enumerate(res["ids"]):
            meta = dict(metas[i] or {})
            if matches is not None and not matches(meta):
                continue
            rows.append(
                ChunkRow(
                    chunk_id=str(chunk_id),
                    metadata=meta,
                    text=None if texts is None else str(texts[i]),
                    embedding=None if vectors is None else [float(x) for x in vectors[i]],
                )
            )
        with self.core.lock:
            complete = self.core.ledger.complete_among(name, [str(r.metadata.get("doc_cid")) for r in rows])
        return [r for r in rows if r.metadata.get("doc_cid") in complete]
