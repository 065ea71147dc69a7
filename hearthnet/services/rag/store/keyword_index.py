"""The store's keyword index (a part :class:`~hearthnet.services.rag.store.store.CorpusStore`
composes): keyword and hybrid queries, and the index of a corpus that predates it, built from
ChromaDB at open.

The keyword index lives in the ledger's database (:mod:`hearthnet.services.rag.search.fulltext`),
written in the transactions that complete or delete a document.  Searches read it through a
read-only connection of their own per thread (WAL: they never wait for the store's lock or a
write), so they see only committed, hence complete, documents.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog

from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.services.rag.results import Hit
from hearthnet.services.rag.search import fulltext
from hearthnet.services.rag.search.filters import build_where, compile_where
from hearthnet.services.rag.search.fusion import HYBRID_CANDIDATES, fuse
from hearthnet.services.rag.store.chroma import chroma_errors
from hearthnet.services.rag.store.core import StoreCore
from hearthnet.services.rag.store.vector_index import VectorIndex, query_vector

__all__ = ["KeywordIndex"]

_log = structlog.get_logger("hearthnet.rag.store")


@dataclass(kw_only=True, eq=False)
class KeywordIndex:
    """Keyword and hybrid queries of the store's corpora, and :meth:`build_missing`.

    Given what it uses of the store: its ``core`` (the index's rows are written by the ledger's
    transactions; this part reads them from the ledger's database file) and the store's ``vectors``
    (a hybrid query's dense leg, the cosines of keyword hits).  Blocking, thread-safe.
    """

    core: StoreCore
    vectors: VectorIndex
    _readers: threading.local = field(default_factory=threading.local, init=False)
    """Each thread's read-only connection to the ledger (keyword searches)."""
    _reader_connections: list[sqlite3.Connection] = field(default_factory=list, init=False)

    # -- the index of a corpus that predates it ------------------------------------------------------
    def build_missing(self) -> list[str]:
        """Build the keyword index of every corpus that has none, from its complete documents in
        ChromaDB (blocking; under the store's lock, so no document completes or goes meanwhile).
        Returns the corpora built; one that cannot be read is logged and left without."""
        built = []
        with self.core.lock:
            missing = self.core.ledger.keyword_missing()
        for name in missing:
            try:
                with self.core.lock:
                    col = self.core.collection(name)
                    complete = set(self.core.ledger.complete_chunks(name))
                    self.core.ledger.build_keywords(name, self._stored_chunks(col, complete))
            except BusError as exc:
                _log.warning("rag_keyword_build_failed", corpus=name, code=exc.code, error=exc.message)
                continue
            built.append(name)
            _log.info("rag_keyword_index_built", corpus=name)
        return built

    def _stored_chunks(self, col: Any, complete: set[str]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
        """``(doc_cid, chunk_id, text, metadata)`` of every chunk of ``complete`` documents in ``col``."""
        offset = 0
        while True:
            with chroma_errors("read the corpus for its keyword index"):
                got = col.get(include=["documents", "metadatas"], limit=self.core.batch, offset=offset)
            if not got["ids"]:
                return
            offset += len(got["ids"])
            for chunk_id, text, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                meta = dict(meta or {})
                if meta.get("doc_cid") in complete:
                    yield str(meta["doc_cid"]), str(chunk_id), text or "", meta

    def ready(self, name: str) -> bool:
        """Whether ``name`` has its keyword index (a corpus that predates it has none until built)."""
        return fulltext.has_index(self._reader(), name)

    def _reader(self) -> sqlite3.Connection:
        """This thread's read-only connection to the ledger's database."""
        db: sqlite3.Connection | None = getattr(self._readers, "db", None)
        if db is None:
            uri = (self.core.root / "ledger.sqlite3").resolve().as_uri() + "?mode=ro"
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            self._readers.db = db
            with self.core.lock:
                self._reader_connections.append(db)
        return db

    def close(self) -> None:
        """Close every thread's read connection (the store is closing)."""
        with self.core.lock:
            for db in self._reader_connections:
                db.close()
            self._reader_connections.clear()
            self._readers = threading.local()

    # -- queries ---------------------------------------------------------------------------------------
    def query_words(
        self,
        name: str,
        embedding: np.ndarray,
        text: str,
        *,
        k: int,
        mode: str,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
        rows: list[fulltext.KeywordRow] | None = None,
    ) -> list[Hit]:
        """The ``k`` best chunks for ``text`` by BM25 (``mode`` ``keyword``) or by the fusion of
        BM25 and cosine (``hybrid``, :func:`fuse`); each hit's ``similarity`` is its cosine to
        ``embedding``.  ``where`` applies to both legs.  ``rows``: the keyword leg, if the caller
        ran it already (:meth:`keyword_leg`, e.g. while the query was being embedded).
        ``NotFound`` for an unknown corpus or one without its keyword index yet
        (:meth:`ready`)."""
        if mode not in ("keyword", "hybrid"):
            raise BadRequest(f"mode {mode!r} is not a keyword or hybrid query")
        self.core.collection(name)  # NotFound for an unknown corpus, whatever the mode
        with self.core.lock:
            cached = self.core.memory.get(name)
            row = None if cached is not None else self.core.ledger.corpus(name)
        if cached is not None:
            dim = cached.dim
        elif row is not None:
            dim = row.dim
        else:
            raise NotFound(f"corpus {name!r} does not exist")
        vec = query_vector(embedding, dim, k)
        clause = build_where(where) if where else None
        matches = None if clause is None else compile_where(clause)
        wanted = max(k, HYBRID_CANDIDATES) if mode == "hybrid" else k
        dense = []
        if mode == "hybrid":
            dense = self.vectors.query(name, vec, k=wanted, where=where, include_text=include_text)
        if rows is None:
            rows = self._keyword_rows(name, text, wanted, matches)
        found = {h.chunk_id: h for h in dense}
        missing = [r.chunk_id for r in rows if r.chunk_id not in found]
        return _ranked(mode, k, rows, found, self._chunks(name, missing, vec, include_text))

    def words_in_memory(
        self,
        name: str,
        embedding: np.ndarray,
        rows: list[fulltext.KeywordRow],
        *,
        k: int,
        mode: str,
        include_text: bool,
        max_floats: int,
    ) -> list[Hit] | None:
        """:meth:`query_words`' answer from the in-memory copy, its keyword leg already run, if it can
        be given at once (for the event loop, like :meth:`query_in_memory`: no lock waited for, no
        filter, a copy of at most ``max_floats`` components), else ``None``."""
        index = self.vectors.copy_at_once(name, max_floats) if mode in ("keyword", "hybrid") else None
        if index is None:
            return None
        vec = query_vector(embedding, index.dim, k)
        dense = (
            index.search(vec, max(k, HYBRID_CANDIDATES), include_text=include_text)
            if mode == "hybrid"
            else []
        )
        found = {h.chunk_id: h for h in dense}
        missing = [r.chunk_id for r in rows if r.chunk_id not in found]
        return _ranked(mode, k, rows, found, index.chunks(missing, vec, include_text=include_text))

    def keyword_leg(
        self, name: str, text: str, *, k: int, mode: str, where: Mapping[str, Any] | None = None
    ) -> list[fulltext.KeywordRow] | None:
        """The keyword leg of a ``mode`` query (``keyword``: ``k`` rows, ``hybrid``: its candidates),
        needing no vector, so it can run while the query is embedded; ``None`` if the corpus has no
        keyword index (yet)."""
        if not self.ready(name):
            return None
        clause = build_where(where) if where else None
        wanted = max(k, HYBRID_CANDIDATES) if mode == "hybrid" else k
        return self._keyword_rows(name, text, wanted, None if clause is None else compile_where(clause))

    def _keyword_rows(
        self, name: str, text: str, limit: int, matches: fulltext.Matches | None
    ) -> list[fulltext.KeywordRow]:
        """The keyword leg: ``text``'s best chunks by BM25, words in half the chunks or more left out
        (:func:`fulltext.too_common`)."""
        try:
            return self._read_keywords(name, text, limit, matches)
        except sqlite3.OperationalError as exc:  # no such table: the corpus has no index (yet)
            raise NotFound(f"corpus {name!r} has no keyword index") from exc

    def _read_keywords(
        self, name: str, text: str, limit: int, matches: fulltext.Matches | None
    ) -> list[fulltext.KeywordRow]:
        db = self._reader()
        (chunks,) = db.execute(
            "SELECT COALESCE(SUM(chunks), 0) FROM documents WHERE corpus = ? AND status = 'complete'", (name,)
        ).fetchone()
        skip = fulltext.too_common(db, name, fulltext.single_tokens(text), int(chunks))
        expression = fulltext.match_expression(text, skip)
        return [] if expression is None else fulltext.search(db, name, expression, limit, matches=matches)

    def _chunks(self, name: str, ids: list[str], vec: np.ndarray, include_text: bool) -> list[Hit]:
        """The chunks ``ids`` of complete documents, scored by cosine: from the in-memory copy, else
        from ChromaDB (whose vectors are normalised here)."""
        if not ids:
            return []
        with self.core.lock:
            index = self.core.memory.get(name)
        if index is not None:
            return index.chunks(ids, vec, include_text=include_text)
        col = self.core.collection(name)
        include = ["embeddings", "metadatas", *(["documents"] if include_text else [])]
        with chroma_errors("read chunks"):
            got = col.get(ids=ids, include=include)
        if not got["ids"]:
            return []
        vectors = np.asarray(got["embeddings"], dtype=np.float32)
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        sims = vectors @ (vec / max(float(np.linalg.norm(vec)), 1e-12))
        texts = got.get("documents") if include_text else None
        hits = [
            Hit(
                str(cid),
                (texts[i] or "") if texts is not None else None,
                dict(got["metadatas"][i] or {}),
                float(s),
            )
            for i, (cid, s) in enumerate(zip(got["ids"], sims, strict=True))
        ]
        return self.vectors.complete_only(name, hits)


def _ranked(
    mode: str, k: int, rows: list[fulltext.KeywordRow], found: dict[str, Hit], more: list[Hit]
) -> list[Hit]:
    """The answer of a ``keyword`` (by BM25) or ``hybrid`` (fused) query from its keyword ``rows``
    and the candidates with their cosines (``found``: the dense leg's, ``more``: the keyword leg's
    others); a row whose chunk is gone (its document deleted meanwhile) is left out."""
    for hit in more:
        found[hit.chunk_id] = hit
    if mode == "keyword":
        return [
            Hit(
                r.chunk_id,
                found[r.chunk_id].text,
                found[r.chunk_id].metadata,
                r.bm25,
                found[r.chunk_id].score,
            )
            for r in rows
            if r.chunk_id in found
        ]
    fused = fuse({cid: h.score for cid, h in found.items()}, {r.chunk_id: r.bm25 for r in rows})[:k]
    return [Hit(cid, found[cid].text, found[cid].metadata, score, found[cid].score) for cid, score in fused]
