"""The corpus store: every corpus of one node, each a ChromaDB collection (cosine space) with its
documents in the ledger.  Blocking API (call it from a worker thread); thread-safe.

Atomicity per document (see ``specs/rag.md``): the ledger records a document as ``pending``
before any of its chunks is written and flips it to ``complete`` in one transaction after the
last batch, the same that writes its keyword index rows (a delete takes them out in the one that
marks it ``deleting``), so a document is in both indexes or in neither.  On open,
:meth:`CorpusStore.recover` deletes the chunks of every document that is not ``complete`` (a
writer killed midway, even by ``kill -9``), and queries exclude documents that are pending in
this process.  A reindex rebuilds a corpus beside the old one and swaps it
in (:meth:`CorpusStore.replace_corpus`).

The store is composed of parts, each its own object given what it uses of the store: the
ledger (:mod:`.ledger`), the vector index (:mod:`.vector_index`: dense queries, chunk reads),
the keyword index (:mod:`.keyword_index`: keyword and hybrid queries), the swap
(:mod:`.swap`: a reindex's swap, a corpus dropped) and the updates (:mod:`.update`: a
document's title and metadata changed in place).  The store itself keeps the collections and
the writes and deletes of documents, and answers for its parts (its API is theirs too).

Small corpora are searched exactly: while a corpus fits the budget of
:class:`~hearthnet.services.rag.search.memory.InMemoryCopies`, its complete documents are also
held in an :class:`~hearthnet.services.rag.search.exact.ExactIndex` (loaded on its first query,
or kept from the writes) and queries never touch the HNSW index.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from hearthnet.contracts.rag import announced, validate_corpus_name
from hearthnet.errors import BadRequest, InternalError, NotFound
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.results import Hit
from hearthnet.services.rag.search.fulltext import KeywordRow
from hearthnet.services.rag.search.memory import EXACT_MAX_CHUNKS, InMemoryCopies
from hearthnet.services.rag.store.chroma import (
    HNSW_PARAMS,
    CollectionGone,
    Collections,
    chroma_errors,
    close_client,
    collection_name,
    collection_settings,
    open_client,
    staging_collection_name,
)
from hearthnet.services.rag.store.core import StoreCore
from hearthnet.services.rag.store.document_list import DocumentList
from hearthnet.services.rag.store.kept import KeptVectors
from hearthnet.services.rag.store.keyword_index import KeywordIndex
from hearthnet.services.rag.store.ledger import CorpusRecord, Ledger, WriterLock
from hearthnet.services.rag.store.swap import CorpusSwap
from hearthnet.services.rag.store.update import DocumentUpdates
from hearthnet.services.rag.store.vector_index import ChunkRow, VectorIndex
from hearthnet.services.rag.store.write import (
    DocumentSource,
    DocumentWrite,
    out_of_space,
)

__all__ = ["DEFAULT_ROOT", "CorpusRecord", "CorpusStore"]

DEFAULT_ROOT = Path.home() / ".local" / "share" / "hearthnet" / "rag"
_log = structlog.get_logger("hearthnet.rag.store")


class CorpusStore:
    """All corpora of one node store directory (``root``): the collections, the writes and deletes
    here; its parts (module docstring) answer queries, swaps and metadata updates."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        server_url: str | None = None,
        hnsw_params: Mapping[str, Any] | None = None,
        batch_size: int | None = None,
        exact_max_chunks: int = EXACT_MAX_CHUNKS,
    ) -> None:
        self.root = Path(root) if root is not None else DEFAULT_ROOT
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._writer = WriterLock(self.root)
        self._remote = server_url is not None
        self._hnsw = dict(HNSW_PARAMS if hnsw_params is None else hnsw_params)
        self._pending: dict[str, set[str]] = {}
        """Documents being written by this process, per corpus (hidden from queries)."""
        self._memory = InMemoryCopies(exact_max_chunks)
        ledger: Ledger | None = None
        try:
            self._ledger = ledger = Ledger(self.root / "ledger.sqlite3")
            self._client = open_client(self.root, server_url)
            with chroma_errors("connect"):
                self._max_batch = int(self._client.get_max_batch_size())
            self._batch = max(1, min(self._max_batch, batch_size or 1000))
            self._compose()
            removed = self.recover()
            self.kept = KeptVectors(self.root / "kept.sqlite3")
            """Vectors of documents being ingested, kept until written (an interrupted ingest resumes)."""
        except BaseException:
            if ledger is not None:
                ledger.close()
            if hasattr(self, "_client"):
                close_client(self._client)
            self._writer.release()
            raise
        if any(removed.values()):
            _log.warning("rag_store_recovered", removed=removed)

    def _compose(self) -> None:
        """The parts, each given what it uses of the store."""
        self._collections = Collections(
            lock=self._lock,
            ledger=self._ledger,
            client=self._client,
            remote=self._remote,
            finish_swap=lambda name: self._swap.finish(name),
            drop=self._forget_corpus,
        )
        core = StoreCore(
            root=self.root,
            lock=self._lock,
            ledger=self._ledger,
            memory=self._memory,
            collection=self._collection,
            writing=self._writing,
            batch=self._batch,
        )
        self._docs = DocumentList(core=core, remote=self._remote)
        self._vectors = VectorIndex(core=core, handles=self._collections)
        self._keywords = KeywordIndex(core=core, vectors=self._vectors)
        self._swap = CorpusSwap(
            core=core,
            client=self._client,
            hnsw=self._hnsw,
            write_document=self._write_document,
            forget=self._forget_caches,
            info=self.info,
        )
        self.updates = DocumentUpdates(core=core, docs=self._docs, corpora=self.corpora)
        """A document's title and metadata changed in place."""

    def _writing(self, name: str) -> set[str]:
        """The documents this process is writing to ``name`` (hidden from queries)."""
        with self._lock:
            return set(self._pending.get(name, ()))

    # ----------------------------------------------------------------- the parts' API

    def query(self, name: str, embedding: np.ndarray, **kw: Any) -> list[Hit]:
        """The ``k`` most similar chunks (``k``, ``where``, ``include_text``: :meth:`VectorIndex.query`)."""
        return self._vectors.query(name, embedding, **kw)

    def query_in_memory(self, name: str, embedding: np.ndarray, **kw: Any) -> list[Hit] | None:
        """:meth:`query`'s answer if the in-memory copy gives it at once, else ``None``
        (:meth:`VectorIndex.query_in_memory`)."""
        return self._vectors.query_in_memory(name, embedding, **kw)

    def get_chunks(self, name: str, **kw: Any) -> list[ChunkRow]:
        """Stored chunks by ids, filter or text (:meth:`VectorIndex.get_chunks`)."""
        return self._vectors.get_chunks(name, **kw)

    def document_chunks(
        self, name: str, doc_cid: str
    ) -> tuple[list[str], list[str], list[dict[str, Any]], np.ndarray] | None:
        """A complete document's chunks and vectors (:meth:`VectorIndex.document_chunks`)."""
        return self._vectors.document_chunks(name, doc_cid)

    def warm_exact(self) -> list[str]:
        """Load the exact copy of every corpus that fits the budget (:meth:`VectorIndex.warm_exact`)."""
        return self._vectors.warm_exact(self.corpora())

    def query_words(self, name: str, embedding: np.ndarray, text: str, **kw: Any) -> list[Hit]:
        """A ``keyword`` or ``hybrid`` query (:meth:`KeywordIndex.query_words`)."""
        return self._keywords.query_words(name, embedding, text, **kw)

    def words_in_memory(
        self, name: str, embedding: np.ndarray, rows: list[KeywordRow], **kw: Any
    ) -> list[Hit] | None:
        """:meth:`query_words` from the in-memory copy at once (:meth:`KeywordIndex.words_in_memory`)."""
        return self._keywords.words_in_memory(name, embedding, rows, **kw)

    def keyword_leg(
        self, name: str, text: str, *, k: int, mode: str, where: Mapping[str, Any] | None = None
    ) -> list[KeywordRow] | None:
        """A query's keyword leg, needing no vector (:meth:`KeywordIndex.keyword_leg`)."""
        return self._keywords.keyword_leg(name, text, k=k, mode=mode, where=where)

    def keyword_ready(self, name: str) -> bool:
        """Whether ``name`` has its keyword index yet (:meth:`KeywordIndex.ready`)."""
        return self._keywords.ready(name)

    def build_keywords(self) -> list[str]:
        """The keyword index of every corpus that predates it (:meth:`KeywordIndex.build_missing`)."""
        return self._keywords.build_missing()

    def replace_corpus(self, name: str, **kw: Any) -> CorpusRecord:
        """Rebuild ``name`` from ``documents`` with ``embedding_model`` and ``dim``, all or nothing
        (:meth:`CorpusSwap.replace_corpus`)."""
        return self._swap.replace_corpus(name, **kw)

    def drop_corpus(self, name: str) -> bool:
        """Remove ``name`` wholly (:meth:`CorpusSwap.drop_corpus`)."""
        return self._swap.drop_corpus(name)

    # ----------------------------------------------------------------- corpora

    def _collection(self, name: str) -> Any:
        """The corpus's collection, or ``NotFound`` if it is gone (:meth:`Collections.open`)."""
        return self._collections.open(name)

    def _forget_corpus(self, name: str) -> None:
        """Remove a corpus from the ledger and the caches (caller holds the lock)."""
        self._ledger.forget_corpus(name)
        self._forget_caches(name)

    def _forget_caches(self, name: str) -> None:
        """Drop what the store holds of a corpus besides the ledger: its collection handle, its
        metadata keys, its in-memory copy and its writes in progress."""
        with self._lock:
            self._collections.forget(name)
            self._docs.changed(name)
            self._memory.forget(name)
            self._pending.pop(name, None)

    def create_corpus(self, name: str, *, embedding_model: str, dim: int) -> CorpusRecord:
        """Create ``name`` (idempotent for the same model and dimension)."""
        validate_corpus_name(name)
        if not embedding_model or dim <= 0:
            raise BadRequest("embedding_model must be non-empty and dim positive")
        with self._lock:
            row = self._ledger.corpus(name)
            if row is not None:
                if (row.embedding_model, row.dim) != (embedding_model, dim):
                    raise BadRequest(
                        f"corpus {name!r} was built with {row.embedding_model} (dim {row.dim}), not "
                        f"{embedding_model} (dim {dim}); reindex it with `hearthnet rag reindex --corpus "
                        f"{name}` or use another corpus"
                    )
                return self.info(name)
            created = time.time()
            settings = collection_settings(
                name, embedding_model=embedding_model, dim=dim, created=created, hnsw=self._hnsw
            )
            with chroma_errors("create collection"):
                col = self._client.get_or_create_collection(
                    collection_name(name), **settings, embedding_function=None
                )
            got = col.metadata or {}
            if (got.get("embedding_model"), got.get("dim")) != (embedding_model, dim):
                raise BadRequest(
                    f"collection for corpus {name!r} already exists with model {got.get('embedding_model')} "
                    f"(dim {got.get('dim')}); reindex or use another corpus"
                )
            self._ledger.add_corpus(name, embedding_model, dim, created)
            self._collections.hold(name, col)
            self._memory.created(name, dim)
            return self.info(name)

    def corpora(self) -> list[str]:
        with self._lock:
            return self._ledger.corpora()

    def info(self, name: str) -> CorpusRecord:
        validate_corpus_name(name)
        with self._lock:
            row = self._ledger.corpus(name)
            if row is None:
                raise NotFound(f"corpus {name!r} does not exist")
            docs, chunks, text_bytes = self._ledger.sizes(name)
            language = self._ledger.language_majority(name)
        # Estimate (same in embedded and server mode): text + float32 vector +
        # HNSW links (2 * max_neighbors int32 on level 0) + ~200 B metadata per chunk.
        links = 2 * int(self._hnsw.get("max_neighbors", 16)) * 4
        size = text_bytes + chunks * (row.dim * 4 + links + 200)
        return CorpusRecord(
            name=name,
            docs=docs,
            chunks=chunks,
            size_bytes=size,
            language_majority=language,
            embedding_model=row.embedding_model,
            dim=row.dim,
            schema_version=row.schema_version,
        )

    # ----------------------------------------------------------------- documents (the document list's)

    def has_document(self, name: str, doc_cid: str) -> bool:
        return self._docs.has_document(name, doc_cid)

    def document_chunk_count(self, name: str, doc_cid: str) -> int:
        return self._docs.document_chunk_count(name, doc_cid)

    def document_tokens(self, name: str, doc_cid: str) -> int:
        """Estimated tokens indexed for a complete document (0 if absent)."""
        return self._docs.document_tokens(name, doc_cid)

    def documents(self, name: str) -> list[dict[str, Any]]:
        """Complete documents of a corpus (:meth:`DocumentList.documents`)."""
        return self._docs.documents(name)

    def document(self, name: str, doc_cid: str) -> dict[str, Any] | None:
        """One complete document, or ``None`` (:meth:`DocumentList.document`)."""
        return self._docs.document(name, doc_cid)

    def list_documents(
        self, name: str, *, after: str = "", limit: int = 200
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of the corpus's complete documents and their total (:meth:`DocumentList.page`)."""
        return self._docs.page(name, after=after, limit=limit)

    def metadata_keys(self, name: str) -> frozenset[str] | None:
        """The metadata keys the corpus's documents have (:meth:`DocumentList.metadata_keys`)."""
        return self._docs.metadata_keys(name)

    # ----------------------------------------------------------------- the atomic write and delete

    def _write_document(self, col: Any, doc: DocumentWrite) -> None:
        """All of one document's chunks into ``col``, in writes of at most the batch size."""
        for a in range(0, len(doc.ids), self._batch):
            part = slice(a, a + self._batch)
            self._write_batch(col, doc.ids[part], doc.vectors[part], doc.texts[part], doc.metadatas[part])

    def _write_batch(
        self, col: Any, ids: list[str], vecs: np.ndarray, docs: list[str], metas: list[Any]
    ) -> None:
        """One Chroma write (a seam for the crash test)."""
        with chroma_errors("add chunks"):
            col.upsert(ids=ids, embeddings=vecs, documents=docs, metadatas=metas)

    def _delete_batch(self, col: Any, ids: list[str]) -> None:
        """One Chroma delete (a seam for the crash test)."""
        with chroma_errors("delete chunks"):
            col.delete(ids=ids)

    def add_document(
        self,
        name: str,
        chunks: Sequence[Chunk],
        embeddings: np.ndarray,
        *,
        source: DocumentSource | None = None,
    ) -> None:
        """Add all chunks of one document atomically (:meth:`add_documents`); ``source`` (file
        name, pages, who asked) is kept in the ledger for ``rag.list_documents``."""
        self.add_documents(name, [(chunks, embeddings, source)])

    def add_documents(
        self, name: str, documents: Sequence[tuple[Sequence[Chunk], np.ndarray, DocumentSource | None]]
    ) -> list[bool]:
        """Add several documents with one ChromaDB write, each atomic and idempotent on its own.

        Every document goes through the per-document unit (:meth:`_begin_documents`,
        :meth:`_commit_documents`, :meth:`_purge` on failure) as :meth:`add_document` does; only
        the vector write and the ledger's commits are shared.  A failure undoes every document of
        the call (none is left half-written) and is raised.  Returns, per document, whether it
        was written (``False``: it was complete already).  A document whose source ``replaces``
        another takes its place in one commit (the old one purged after, its deletion owed an
        announcement if the corpus is announced: :meth:`pending_deletions`)."""
        col = self._collection(name)
        dim = self.info(name).dim
        writes = [(DocumentWrite.of(c, v, dim), s or DocumentSource()) for c, v, s in documents]
        cids = [w.doc_cid for w, _ in writes]
        if len(set(cids)) != len(cids):
            raise BadRequest("a document appears twice in one write")
        todo = self._claim_documents(name, writes)
        try:
            self._begin_documents(name, todo)
            ids = [i for w, _ in todo for i in w.ids]
            if ids:
                vectors = np.concatenate([w.vectors for w, _ in todo], axis=0)
                texts = [t for w, _ in todo for t in w.texts]
                metas = [m for w, _ in todo for m in w.metadatas]
                for a in range(0, len(ids), self._batch):
                    part = slice(a, a + self._batch)
                    self._write_batch(col, ids[part], vectors[part], texts[part], metas[part])
            replaced = self._commit_documents(name, todo)
        except BaseException as exc:
            if isinstance(exc, CollectionGone):
                self._collections.forget(name)
            for w, _ in todo:  # undo each (recover() finishes what a second failure leaves)
                with contextlib.suppress(Exception):
                    self._purge(name, w.doc_cid)
            if isinstance(exc, Exception):
                full = out_of_space(self.root, exc, needed=sum(w.size for w, _ in todo))
                if full is not None:
                    raise full from exc
            raise
        finally:
            with self._lock:
                for w, _ in todo:
                    self._pending.get(name, set()).discard(w.doc_cid)
        for old in replaced:  # hidden since the commit: now its chunks go (recover() ends a cut)
            self._purge(name, old, announce=announced(name))
        written = {w.doc_cid for w, _ in todo}
        for w, _ in todo:
            _log.info("rag_document_added", corpus=name, doc_cid=w.doc_cid, chunks=len(w.ids))
        return [cid in written for cid in cids]

    # The per-document atomic unit: claimed (hidden from queries), begun (``pending`` in the
    # ledger before any chunk is written), committed (``complete``: visible), or purged.  Whatever
    # else must be written with a document's vectors joins it here: in ``_begin_documents`` and
    # ``_commit_documents`` (inside the ledger's transaction) and in ``_purge`` (its undo).
    def _claim_documents(
        self, name: str, writes: Sequence[tuple[DocumentWrite, DocumentSource]]
    ) -> list[tuple[DocumentWrite, DocumentSource]]:
        """The documents still to write, marked as being written by this process (a document
        complete already is skipped; one another call is writing is refused, nothing claimed)."""
        with self._lock:
            busy = self._pending.setdefault(name, set())
            todo = []
            for w, source in writes:
                st = self._ledger.status(name, w.doc_cid)
                if st is not None and st[0] == "complete":
                    continue
                if w.doc_cid in busy:
                    raise BadRequest(
                        f"document {w.doc_cid} is being written to corpus {name!r} by another call; "
                        "try again when it is done"
                    )
                todo.append((w, source))
            busy.update(w.doc_cid for w, _ in todo)
            return todo

    def _begin_documents(self, name: str, todo: Sequence[tuple[DocumentWrite, DocumentSource]]) -> None:
        """Each document ``pending`` in the ledger (one transaction) before any chunk is written;
        one an earlier undo left behind is purged first (its chunks, perhaps of other ids, must
        not come back)."""
        for w, _ in todo:
            with self._lock:
                left = self._ledger.status(name, w.doc_cid) is not None
            if left:
                self._purge(name, w.doc_cid)
        now = time.time()
        with self._lock, self._ledger.batch():
            for w, source in todo:
                self._ledger.begin_write(name, w, source, now)

    def _commit_documents(self, name: str, todo: Sequence[tuple[DocumentWrite, DocumentSource]]) -> list[str]:
        """Each written document ``complete``, each it replaces ``deleting`` (one transaction): from
        here queries see the new ones, not the old ones (returned)."""
        now, docs, replaced = time.time(), [w for w, _ in todo], []
        olds = {s.replaces for _, s in todo if s.replaces} - {w.doc_cid for w in docs}
        with self._lock:
            with self._ledger.batch():
                for w in docs:
                    if not self._ledger.complete(name, w, now):
                        raise InternalError(f"document {w.doc_cid} left the ledger while being written")
                busy = self._pending.get(name, set())
                owed = announced(name)  # the old version's deletion is announced like a delete's
                replaced = [o for o in sorted(olds - busy) if self._ledger.mark_replaced(name, o, owed)]
            self._docs.changed(name)
            self._memory.changed(name)
            for old in replaced:
                self._memory.deleting(name, old)
            for w in docs:
                self._memory.added(name, w.ids, w.vectors, w.texts, w.metadatas)
        self.kept.drop([w.doc_cid for w in docs])
        return replaced

    def _purge(self, name: str, doc_cid: str, *, announce: bool = False) -> int:
        """Delete every chunk of ``doc_cid`` from Chroma, then its ledger row.

        ``announce``: a ``rag.delete``, whose event is still to be appended: a marker committed
        with the ``deleting`` status says so until :meth:`deletion_announced`.
        """
        col = self._collection(name)
        with self._lock:
            self._ledger.begin_delete(name, doc_cid, announce=announce)
            self._docs.changed(name)
            self._memory.deleting(name, doc_cid)
        with chroma_errors("delete chunks"):
            found = col.get(where={"doc_cid": doc_cid}, include=[])
        ids = list(found["ids"])
        for a in range(0, len(ids), self._batch):
            self._delete_batch(col, ids[a : a + self._batch])
        with self._lock:
            self._ledger.remove(name, doc_cid)
        return len(ids)

    def delete_document(self, name: str, doc_cid: str, *, announce: bool = False) -> int:
        """Remove a document wholly; returns the number of chunks removed (0 if absent).

        Atomic like :meth:`add_document`: from the transaction that marks it
        ``deleting`` no query sees it, and a kill midway is finished by
        :meth:`recover`.  ``announce`` also records it in :meth:`pending_deletions`
        in that transaction, for the caller to announce and then clear.
        """
        self._collection(name)
        with self._lock:
            if self._ledger.status(name, doc_cid) is None:
                return 0
            if doc_cid in self._pending.get(name, ()):
                raise BadRequest(
                    f"document {doc_cid} is being written to corpus {name!r}; delete it when that is done"
                )
        removed = self._purge(name, doc_cid, announce=announce)
        _log.info("rag_document_deleted", corpus=name, doc_cid=doc_cid, chunks=removed)
        return removed

    def holds_source(self, doc_cid: str) -> bool:
        """Whether any corpus of this store has (or is writing) ``doc_cid``: its source stays pinned."""
        with self._lock:
            return self._ledger.holds(doc_cid)

    def pending_deletions(self) -> list[tuple[str, str]]:
        """``(corpus, doc_cid)`` of deletes done (or finished by :meth:`recover`) but not yet announced."""
        with self._lock:
            return self._ledger.pending_deletions()

    def deletion_announced(self, name: str, doc_cid: str) -> None:
        with self._lock:
            self._ledger.deletion_announced(name, doc_cid)

    def recover(self) -> dict[str, int]:
        """Delete chunks of documents not marked complete; returns chunks removed per corpus.

        A corpus whose collection is gone (e.g. a reindex killed after dropping it)
        is dropped from the ledger first; on a ChromaDB server it is kept as it
        is (see :meth:`_collection`) and its unfinished documents wait for it.
        """
        from chromadb.errors import NotFoundError

        with self._lock:
            for name in self._ledger.swaps():
                self._swap.finish(name)
                _log.warning("rag_reindex_swap_finished", corpus=name)
        for name in self.corpora():  # a rebuild that never reached its swap: the old corpus stands
            with chroma_errors("drop an unfinished rebuild"), contextlib.suppress(NotFoundError):
                self._client.delete_collection(staging_collection_name(name))
        missing = set()
        for name in self.corpora():
            try:
                self._collection(name)
            except NotFound:
                missing.add(name)
        with self._lock:
            rows = self._ledger.unfinished()
            busy = {(c, d) for c, docs in self._pending.items() for d in docs}
        out: dict[str, int] = {}
        for corpus, doc_cid in rows:
            if (corpus, doc_cid) in busy or corpus in missing:
                continue
            out[corpus] = out.get(corpus, 0) + self._purge(corpus, doc_cid)
        self.updates.finish_updates()
        return out

    def close(self) -> None:
        """Release the writer lock, the ledger and the ChromaDB client (idempotent)."""
        with self._lock:
            self._collections.clear()
            self._memory.clear()
            self._keywords.close()
            self._ledger.close()
            self.kept.close()
            close_client(self._client)
            self._writer.release()

    def __enter__(self) -> CorpusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
