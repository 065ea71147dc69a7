"""ChromaDB-backed corpus store: one collection per corpus, cosine space.

Blocking API (call it through ``anyio.to_thread`` with a limiter); thread-safe.

Atomicity per document (see ``specs/rag.md``): a small SQLite *ledger* next to
the Chroma data records every document as ``pending`` before any of its chunks
is written and flips it to ``complete`` in one transaction after the last batch.
On open, :meth:`CorpusStore.recover` deletes the chunks of every document that
is not ``complete`` (a writer killed midway, even by ``kill -9``), and queries
exclude documents that are pending in this process.  One process writes a
store directory at a time (``fcntl.flock`` on ``writer.lock``).

Small corpora are searched exactly: while a corpus fits the store's
``exact_max_chunks`` budget, its complete documents are also held in an
:class:`~hearthnet.services.rag.exact.ExactIndex` (loaded on its first query)
and queries never touch the HNSW index.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import numpy as np
import structlog

from hearthnet.contracts.rag import MAX_CORPUS_NAME, validate_corpus_name
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    InternalError,
    NotFound,
    Partition,
    Timeout,
)
from hearthnet.runtime.sqlite_tx import transaction
from hearthnet.services.rag.chunker import RESERVED_METADATA, Chunk, check_extra_metadata
from hearthnet.services.rag.exact import ExactIndex, ScoredChunk
from hearthnet.services.rag.filters import build_where, chroma_where, compile_where, where_matches

__all__ = [
    "CHUNK_KEYS",
    "EXACT_MAX_CHUNKS",
    "HNSW_PARAMS",
    "SCHEMA_VERSION",
    "CorpusInfo",
    "CorpusStore",
    "DocumentSource",
    "ScoredChunk",
    "build_where",
    "where_matches",
]

SCHEMA_VERSION = 1
# Chosen from bench/rag_recall.py measurements (specs/rag.md, "Store").
HNSW_PARAMS: Mapping[str, Any] = {"ef_construction": 200, "ef_search": 256, "max_neighbors": 32}
DEFAULT_ROOT = Path.home() / ".local" / "share" / "hearthnet" / "rag"
EXACT_MAX_CHUNKS = 30_000
"""Chunks, summed over corpora, searched exactly in memory (~2.5 KB each: vector, text, metadata)."""
OVERFETCH_FACTOR = 5
OVERFETCH_MIN = 50
"""A filtered query first looks at this many nearest chunks unfiltered (see ``_overfetch_then_filter``)."""

_log = structlog.get_logger("hearthnet.rag.store")

# ChromaDB requires collection names of 3-512 characters from ``[a-zA-Z0-9._-]`` that start and
# end alphanumeric.  ``"hn-" + name + "-v1"`` is always valid for a valid corpus name: it is at
# least 7 characters long, starts with ``h`` and ends with ``1``, and a leading or trailing ``-``
# in the corpus name lands in the middle.
COLLECTION_PREFIX = "hn-"
COLLECTION_SUFFIX = "-v1"
_CORPUS_NAME = re.compile(r"[a-z0-9-]+")


def collection_name(corpus: str) -> str:
    """The ChromaDB collection that holds ``corpus`` (validated first)."""
    return f"{COLLECTION_PREFIX}{validate_corpus_name(corpus)}{COLLECTION_SUFFIX}"


def staging_collection_name(corpus: str) -> str:
    """Where a reindex writes the rebuilt ``corpus`` before it replaces the collection.

    ``collection_name(corpus) + ".rebuild"``: valid for ChromaDB (ends alphanumeric) and never
    taken for a corpus's own collection by :func:`corpus_from_collection`.
    """
    return f"{collection_name(corpus)}.rebuild"


def corpus_from_collection(collection: str) -> str | None:
    """The corpus held by ``collection``, or None if it is not one of ours."""
    if not (collection.startswith(COLLECTION_PREFIX) and collection.endswith(COLLECTION_SUFFIX)):
        return None
    name = collection[len(COLLECTION_PREFIX) : -len(COLLECTION_SUFFIX)]
    if not name or len(name) > MAX_CORPUS_NAME or _CORPUS_NAME.fullmatch(name) is None:
        return None
    return name


_SQLITE_FULL = 13
_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_MIN_FREE_BYTES = 1 << 20


@dataclass(frozen=True)
class CorpusInfo:
    """What the store knows about a corpus (counts from the ledger)."""

    name: str
    docs: int
    chunks: int
    size_bytes: int
    language_majority: str | None
    embedding_model: str
    dim: int
    schema_version: int


def _scored(res: Mapping[str, Any], include_text: bool) -> list[ScoredChunk]:
    ids = res["ids"][0]
    metas = (res.get("metadatas") or [[{}] * len(ids)])[0]
    dists = (res.get("distances") or [[1.0] * len(ids)])[0]
    texts = res["documents"][0] if include_text and res.get("documents") else [None] * len(ids)
    return [
        ScoredChunk(chunk_id=i, text=t, metadata=dict(m or {}), score=1.0 - float(d))
        for i, t, m, d in zip(ids, texts, metas, dists, strict=True)
    ]


# --------------------------------------------------------------------------- lock & ledger


class _WriterLock:
    """``fcntl.flock`` on ``root/writer.lock``; the file holds the owner's pid."""

    def __init__(self, root: Path) -> None:
        self.path = root / "writer.lock"
        fh: IO[str] = self.path.open("a+", encoding="ascii")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise BadRequest(
                f"corpus store {root} is already open by process {holder}; "
                "stop that process or use another store directory"
            ) from exc
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh: IO[str] | None = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


_LEDGER_SCHEMA = """
CREATE TABLE IF NOT EXISTS corpora (
    name TEXT PRIMARY KEY, embedding_model TEXT NOT NULL, dim INTEGER NOT NULL,
    schema_version INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    corpus TEXT NOT NULL, doc_cid TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'complete', 'deleting')),
    chunks INTEGER NOT NULL, text_bytes INTEGER NOT NULL, language TEXT,
    updated_at REAL NOT NULL, tokens INTEGER NOT NULL DEFAULT 0, title TEXT NOT NULL DEFAULT '',
    metadata TEXT,
    PRIMARY KEY (corpus, doc_cid));
CREATE TABLE IF NOT EXISTS reindex_swaps (corpus TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS deletions (
    corpus TEXT NOT NULL, doc_cid TEXT NOT NULL, PRIMARY KEY (corpus, doc_cid));
"""
# ``reindex_swaps``: corpora whose rebuilt collection is committed in the ledger but may not yet
# have replaced the old one in ChromaDB (``recover`` finishes the swap).
# ``metadata``: the caller's document metadata as JSON (reused by a reindex); NULL in ledgers
# written before it existed, where it is read back from one of the document's chunks.
# ``deletions``: documents whose delete (``rag.delete``) is under way or done but not yet announced:
# marked in the transaction that starts the delete, cleared once the event is appended (see
# ``pending_deletions``), so a kill between the two still ends with the event.
# ``filename, pages, ingested_by, ingested_at``: what ``rag.list_documents`` shows (NULL in ledgers
# written before they existed); kept by a reindex.
_DOC_COLUMNS = "corpus, doc_cid, status, chunks, text_bytes, language, updated_at, tokens, title, metadata"
_SOURCE_COLUMNS = {"filename": "TEXT", "pages": "INTEGER", "ingested_by": "TEXT", "ingested_at": "REAL"}
CHUNK_KEYS = frozenset(RESERVED_METADATA - {"chunk_id", "doc_filename"})
"""Metadata keys every chunk has (``doc_filename`` only when the ingest named the file)."""


@dataclass(frozen=True)
class DocumentSource:
    """Where a document came from, as ``rag.list_documents`` shows it."""

    filename: str | None = None
    pages: int | None = None
    ingested_by: str | None = None


def _user_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's part of a chunk's metadata (what the chunker did not set)."""
    return {k: v for k, v in metadata.items() if k not in RESERVED_METADATA}


@dataclass(frozen=True)
class _DocumentWrite:
    """One document's chunks checked and laid out for ChromaDB and the ledger."""

    doc_cid: str
    ids: list[str]
    vectors: np.ndarray
    texts: list[str]
    metadatas: list[dict[str, Any]]
    language: str
    text_bytes: int
    tokens: int
    title: str
    metadata_json: str

    @classmethod
    def of(cls, chunks: Sequence[Chunk], embeddings: np.ndarray, dim: int) -> _DocumentWrite:
        vecs = np.asarray(embeddings, dtype=np.float32)
        if not chunks:
            raise BadRequest("document has no chunks")
        if vecs.ndim != 2 or vecs.shape != (len(chunks), dim):
            raise BadRequest(f"embeddings must have shape ({len(chunks)}, {dim}), got {vecs.shape}")
        if not np.isfinite(vecs).all():
            raise BadRequest("embeddings contain NaN or infinity")
        doc_cids = {c.metadata.get("doc_cid") for c in chunks}
        if len(doc_cids) != 1 or not isinstance(next(iter(doc_cids)), str) or not next(iter(doc_cids)):
            raise BadRequest("all chunks of a document must carry the same non-empty doc_cid")
        ids = [c.chunk_id for c in chunks]
        if len(set(ids)) != len(ids):
            raise BadRequest("chunk ids of a document must be unique")
        langs = [str(c.metadata.get("language") or "und") for c in chunks]
        return cls(
            doc_cid=str(next(iter(doc_cids))),
            ids=ids,
            vectors=vecs,
            texts=[c.text for c in chunks],
            metadatas=[dict(c.metadata) for c in chunks],
            language=max(set(langs), key=langs.count),
            text_bytes=sum(len(c.text.encode()) for c in chunks),
            tokens=sum(int(c.metadata.get("tokens") or 0) for c in chunks),
            title=str(chunks[0].metadata.get("doc_title") or ""),
            metadata_json=json.dumps(_user_metadata(chunks[0].metadata), sort_keys=True),
        )


# --------------------------------------------------------------------------- store


def _query_vector(embedding: np.ndarray, dim: int, k: int) -> np.ndarray:
    """``embedding`` as a flat float32 vector of the corpus's ``dim``; ``BadRequest`` for a wrong
    size, a value that is not finite, or ``k`` below 1."""
    vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
    if vec.shape != (dim,) or not np.isfinite(vec).all():
        raise BadRequest(f"query embedding must be {dim} finite floats")
    if k < 1:
        raise BadRequest("k must be at least 1")
    return vec


class _CollectionGone(NotFound):
    """A cached collection handle whose collection no longer exists (reindexed, deleted, or the
    server lost it): the store drops the handle, so the next use looks the collection up again."""


SERVER_TIMEOUT_SECONDS = 60.0
"""Longest wait for one ChromaDB server request (the client's own default is no limit)."""


@contextlib.contextmanager
def _chroma_errors(what: str) -> Iterator[None]:
    """Convert ChromaDB / transport failures at the boundary."""
    import httpx
    from chromadb.errors import ChromaError, NotFoundError

    try:
        yield
    except NotFoundError as exc:
        raise _CollectionGone(
            f"the vector collection went away while trying to {what} (reindexed or deleted "
            "meanwhile): ask again"
        ) from exc
    except ChromaError as exc:
        raise InternalError(f"vector store failed to {what}: {type(exc).__name__}") from exc
    except httpx.TimeoutException as exc:
        raise Timeout(
            f"vector store did not answer within {SERVER_TIMEOUT_SECONDS:.0f} s while trying to {what}"
        ) from exc
    except (ConnectionError, OSError, httpx.TransportError) as exc:
        raise Partition(f"vector store unreachable while trying to {what}: {type(exc).__name__}") from exc


def _bound_server_requests(client: Any) -> None:
    """Give the ChromaDB server client's HTTP session a finite timeout (it has none by default,
    so a stalled server would hold a store thread forever)."""
    import httpx

    session = getattr(getattr(client, "_server", None), "_session", None)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(SERVER_TIMEOUT_SECONDS, connect=10.0)
    else:  # another chromadb layout: keep going, but say that requests are unbounded
        _log.warning("rag_chroma_server_timeout_not_set", reason="no httpx session found on the client")


MAX_RECHECKED = 2048
"""Most candidates one HNSW query re-checks against the exact filter and the ledger."""


class CorpusStore:
    """All corpora of one node store directory (``root``)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        server_url: str | None = None,
        hnsw_params: Mapping[str, Any] | None = None,
        batch_size: int | None = None,
        exact_max_chunks: int = EXACT_MAX_CHUNKS,
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        self.root = Path(root) if root is not None else DEFAULT_ROOT
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._writer = _WriterLock(self.root)
        self._remote = server_url is not None
        self._hnsw = dict(HNSW_PARAMS if hnsw_params is None else hnsw_params)
        self._pending: dict[str, set[str]] = {}
        self._collections: dict[str, Any] = {}
        self._exact_budget = max(0, exact_max_chunks)
        self._exact: dict[str, ExactIndex] = {}
        self._too_big: set[str] = set()
        """Corpora that did not fit the exact budget when last tried (retried after a delete)."""
        self._exact_gen: dict[str, int] = {}
        """Bumped whenever a corpus's set of complete documents changes (guards unlocked loads)."""
        self._exact_loading: set[str] = set()
        """Corpora whose exact index a query is loading now (one load per corpus at a time)."""
        self._keys: dict[str, frozenset[str] | None] = {}
        """Per corpus, the metadata keys its complete documents have (see ``metadata_keys``)."""
        try:
            self._db = sqlite3.connect(
                self.root / "ledger.sqlite3", check_same_thread=False, isolation_level=None
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_LEDGER_SCHEMA)
            columns = {str(r[1]) for r in self._db.execute("PRAGMA table_info(documents)")}
            if "metadata" not in columns:  # a ledger from before document metadata was kept
                self._db.execute("ALTER TABLE documents ADD COLUMN metadata TEXT")
            for column, kind in _SOURCE_COLUMNS.items():  # ... and before documents were listed
                if column not in columns:
                    self._db.execute(f"ALTER TABLE documents ADD COLUMN {column} {kind}")
            settings = Settings(anonymized_telemetry=False)
            if server_url is None:
                self._client: Any = chromadb.PersistentClient(
                    path=str(self.root / "chroma"), settings=settings
                )
            else:
                url = urlsplit(server_url)
                if url.scheme not in ("http", "https") or not url.hostname:
                    raise BadRequest(f"ChromaDB server URL {server_url!r} must be http(s)://host:port")
                self._client = chromadb.HttpClient(
                    host=url.hostname,
                    port=url.port or (443 if url.scheme == "https" else 8000),
                    ssl=url.scheme == "https",
                    settings=settings,
                )
                _bound_server_requests(self._client)
            with _chroma_errors("connect"):
                self._max_batch = int(self._client.get_max_batch_size())
            self._batch = max(1, min(self._max_batch, batch_size or 1000))
            removed = self.recover()
        except BaseException:
            with contextlib.suppress(Exception):
                self._db.close()
            self._writer.release()
            raise
        if any(removed.values()):
            _log.warning("rag_store_recovered", removed=removed)

    # ----------------------------------------------------------------- corpora

    def _row(self, name: str) -> tuple[str, int, int, float] | None:
        cur = self._db.execute(
            "SELECT embedding_model, dim, schema_version, created_at FROM corpora WHERE name = ?", (name,)
        )
        row = cur.fetchone()
        return None if row is None else (str(row[0]), int(row[1]), int(row[2]), float(row[3]))

    def _collection(self, name: str) -> Any:
        """The corpus's collection, or ``NotFound`` if it is gone.

        Embedded, only an interrupted reindex removes a collection, and the
        corpus is dropped.  On a ChromaDB server a collection can also vanish
        because the node was pointed at another server or the server lost its
        data: then the corpus and its document list are kept, so that the right
        server URL brings it back or ``hearthnet rag reindex`` rebuilds it from
        its source documents.
        """
        from chromadb.errors import NotFoundError

        validate_corpus_name(name)
        with self._lock:
            col = self._collections.get(name)
            if col is not None:
                return col
            if self._row(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
        # Looked up without the lock (on a server this is a network call, and the event loop
        # reads the ledger under the same lock); a miss is decided under it, after any swap.
        with _chroma_errors("open collection"), contextlib.suppress(NotFoundError):
            col = self._client.get_collection(collection_name(name), embedding_function=None)
        with self._lock:
            if self._row(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            cached = self._collections.get(name)
            if cached is not None:
                return cached
            with _chroma_errors("open collection"):
                try:
                    if (
                        col is None
                        and self._db.execute(
                            "SELECT 1 FROM reindex_swaps WHERE corpus = ?", (name,)
                        ).fetchone()
                    ):
                        self._finish_swap(name)  # a reindex's swap failed halfway: finish it now
                    if col is None:
                        col = self._client.get_collection(collection_name(name), embedding_function=None)
                except NotFoundError as exc:
                    _log.warning("rag_corpus_collection_missing", corpus=name, kept=self._remote)
                    if self._remote:
                        raise NotFound(
                            f"corpus {name!r}: its vector collection is not on the ChromaDB server (another "
                            "server, or the server lost its data); its document list is kept: point the node "
                            f"at the right server, or run 'hearthnet rag reindex --corpus {name}' to rebuild "
                            "it from its source documents"
                        ) from exc
                    self._forget_corpus(name)
                    raise NotFound(
                        f"corpus {name!r} does not exist: its vector collection is gone (e.g. a reindex "
                        "was interrupted), so it was dropped; ingest its documents again"
                    ) from exc
            self._collections[name] = col
            return col

    def _forget_corpus(self, name: str) -> None:
        """Remove a corpus from the ledger and the caches (caller holds the lock)."""
        with transaction(self._db):
            self._db.execute("DELETE FROM documents WHERE corpus = ?", (name,))
            self._db.execute("DELETE FROM corpora WHERE name = ?", (name,))
        self._collections.pop(name, None)
        self._exact.pop(name, None)
        self._keys.pop(name, None)
        self._too_big.discard(name)
        # Bumped, never reset: a load of the old collection still running must not be installed.
        self._exact_gen[name] = self._exact_gen.get(name, 0) + 1

    def create_corpus(self, name: str, *, embedding_model: str, dim: int) -> CorpusInfo:
        """Create ``name`` (idempotent for the same model and dimension)."""
        validate_corpus_name(name)
        if not embedding_model or dim <= 0:
            raise BadRequest("embedding_model must be non-empty and dim positive")
        with self._lock:
            row = self._row(name)
            if row is not None:
                if (row[0], row[1]) != (embedding_model, dim):
                    raise BadRequest(
                        f"corpus {name!r} was built with {row[0]} (dim {row[1]}), not {embedding_model} "
                        f"(dim {dim}); reindex it with `hearthnet rag reindex --corpus {name}` "
                        "or use another corpus"
                    )
                return self.info(name)
            created = time.time()
            with _chroma_errors("create collection"):
                col = self._client.get_or_create_collection(
                    collection_name(name),
                    **self._collection_settings(name, embedding_model, dim, created),
                    embedding_function=None,
                )
            got = col.metadata or {}
            if (got.get("embedding_model"), got.get("dim")) != (embedding_model, dim):
                raise BadRequest(
                    f"collection for corpus {name!r} already exists with model {got.get('embedding_model')} "
                    f"(dim {got.get('dim')}); reindex or use another corpus"
                )
            self._db.execute(
                "INSERT INTO corpora VALUES (?, ?, ?, ?, ?)",
                (name, embedding_model, dim, SCHEMA_VERSION, created),
            )
            self._collections[name] = col
            if self._exact_budget > 0:
                # A new corpus has no complete document: its exact index starts empty and each
                # add_document extends it, so no query after a bulk ingest has to load it from
                # ChromaDB (seconds while ChromaDB folds in its write log, for every such query).
                self._exact[name] = ExactIndex(dim)
                self._exact_gen[name] = self._exact_gen.get(name, 0) + 1
            return self.info(name)

    def corpora(self) -> list[str]:
        with self._lock:
            return [str(r[0]) for r in self._db.execute("SELECT name FROM corpora ORDER BY name")]

    def info(self, name: str) -> CorpusInfo:
        validate_corpus_name(name)
        with self._lock:
            row = self._row(name)
            if row is None:
                raise NotFound(f"corpus {name!r} does not exist")
            docs, chunks, text_bytes = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(chunks), 0), COALESCE(SUM(text_bytes), 0) FROM documents "
                "WHERE corpus = ? AND status = 'complete'",
                (name,),
            ).fetchone()
            lang = self._db.execute(
                "SELECT language FROM documents WHERE corpus = ? AND status = 'complete' "
                "GROUP BY language ORDER BY SUM(chunks) DESC, language LIMIT 1",
                (name,),
            ).fetchone()
        model, dim, schema, _ = row
        # Estimate (same in embedded and server mode): text + float32 vector +
        # HNSW links (2 * max_neighbors int32 on level 0) + ~200 B metadata per chunk.
        links = 2 * int(self._hnsw.get("max_neighbors", 16)) * 4
        size = int(text_bytes) + int(chunks) * (dim * 4 + links + 200)
        return CorpusInfo(
            name=name,
            docs=int(docs),
            chunks=int(chunks),
            size_bytes=size,
            language_majority=None if lang is None else lang[0],
            embedding_model=model,
            dim=dim,
            schema_version=schema,
        )

    # ----------------------------------------------------------------- documents

    def _status(self, name: str, doc_cid: str) -> tuple[str, int] | None:
        row = self._db.execute(
            "SELECT status, chunks FROM documents WHERE corpus = ? AND doc_cid = ?", (name, doc_cid)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def has_document(self, name: str, doc_cid: str) -> bool:
        self._collection(name)
        with self._lock:
            st = self._status(name, doc_cid)
        return st is not None and st[0] == "complete"

    def document_chunk_count(self, name: str, doc_cid: str) -> int:
        self._collection(name)
        with self._lock:
            st = self._status(name, doc_cid)
        return st[1] if st is not None and st[0] == "complete" else 0

    def document_tokens(self, name: str, doc_cid: str) -> int:
        """Estimated tokens indexed for a complete document (0 if absent)."""
        self._collection(name)
        with self._lock:
            row = self._db.execute(
                "SELECT tokens FROM documents WHERE corpus = ? AND doc_cid = ? AND status = 'complete'",
                (name, doc_cid),
            ).fetchone()
        return 0 if row is None else int(row[0])

    def documents(self, name: str) -> list[dict[str, Any]]:
        """Complete documents of a corpus: ``{doc_cid, title, language, chunks, tokens, metadata, filename}``.

        ``metadata`` is the caller's metadata given at ingest (what a reindex must keep).
        """
        return self._documents(name, None)

    def document(self, name: str, doc_cid: str) -> dict[str, Any] | None:
        """One complete document as in :meth:`documents`, or ``None``.

        ``NotFound`` if the corpus's collection is missing (its chunks cannot
        be answered, so "already ingested" would not be true).
        """
        self._collection(name)
        found = self._documents(name, doc_cid)
        return found[0] if found else None

    def _documents(self, name: str, doc_cid: str | None) -> list[dict[str, Any]]:
        validate_corpus_name(name)
        one = "" if doc_cid is None else " AND doc_cid = ?"
        with self._lock:
            if self._row(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            rows = self._db.execute(
                "SELECT doc_cid, title, language, chunks, tokens, metadata, filename FROM documents "
                f"WHERE corpus = ? AND status = 'complete'{one} ORDER BY doc_cid",
                (name,) if doc_cid is None else (name, doc_cid),
            ).fetchall()
        out = []
        for cid, title, language, chunks, tokens, meta, filename in rows:
            # the ledger keeps the metadata (older ledgers did not: then it is read from a chunk), so
            # a reindex can rebuild a corpus whose collection is missing on a ChromaDB server
            metadata = json.loads(meta) if meta is not None else self._old_metadata(name, str(cid))
            out.append(
                {
                    "doc_cid": str(cid),
                    "title": str(title),
                    "language": language,
                    "chunks": int(chunks),
                    "tokens": int(tokens),
                    "metadata": metadata,
                    "filename": filename,
                }
            )
        return out

    def _old_metadata(self, name: str, doc_cid: str) -> dict[str, Any]:
        """Metadata of a row from before the ledger kept it: from a chunk, or none if the
        collection is missing on a server (a reindex then rebuilds the document without it)."""
        try:
            col = self._collection(name)
        except NotFound:
            if not self._remote:
                raise
            _log.warning("rag_metadata_unrecoverable", corpus=name, doc_cid=doc_cid)
            return {}
        return self._metadata_from_chunks(col, doc_cid)

    def _metadata_from_chunks(self, col: Any, doc_cid: str) -> dict[str, Any]:
        """The caller's metadata of a document recorded before the ledger kept it: from one chunk."""
        with _chroma_errors("read document metadata"):
            got = col.get(where={"doc_cid": doc_cid}, limit=1, include=["metadatas"])
        metas = got.get("metadatas") or [{}]
        out: dict[str, Any] = {}
        for key, value in _user_metadata((metas[0] if metas else None) or {}).items():
            with contextlib.suppress(BadRequest):  # a field older versions let through (e.g. NaN)
                out.update(check_extra_metadata({key: value}))
        return out

    def replace_corpus(
        self,
        name: str,
        *,
        embedding_model: str,
        dim: int,
        documents: Sequence[tuple[Sequence[Chunk], np.ndarray]],
    ) -> CorpusInfo:
        """Rebuild ``name`` from ``documents`` (a reindex, perhaps with another model), all or nothing.

        Creates the corpus if it does not exist (e.g. its collection was lost).

        The new collection is written beside the old one, which keeps answering
        queries meanwhile.  If anything fails while it is written (a full disk,
        a ChromaDB error, a bad document), it is dropped and the corpus stays as
        it was.  Then one ledger transaction records the new documents and
        model together with a swap marker, and the old collection is replaced by
        the new one; a crash before the marker leaves the old corpus, a crash
        after it is finished by :meth:`recover` at the next start.
        """
        from chromadb.errors import NotFoundError

        validate_corpus_name(name)
        if not embedding_model or dim <= 0:
            raise BadRequest("embedding_model must be non-empty and dim positive")
        writes = [_DocumentWrite.of(chunks, vectors, dim) for chunks, vectors in documents]
        if len({w.doc_cid for w in writes}) != len(writes):
            raise BadRequest("a document is listed twice")
        staging = staging_collection_name(name)
        created = time.time()
        with _chroma_errors("create the rebuilt collection"):
            with contextlib.suppress(NotFoundError):
                self._client.delete_collection(staging)
            col = self._client.create_collection(
                staging,
                **self._collection_settings(name, embedding_model, dim, created),
                embedding_function=None,
            )
        try:
            for w in writes:
                self._write_document(col, w)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self._client.delete_collection(staging)
            if isinstance(exc, Exception):
                full = self._out_of_space(exc, needed=sum(w.text_bytes + w.vectors.nbytes for w in writes))
                if full is not None:
                    raise full from exc
            raise
        with self._lock:
            with transaction(self._db):
                kept = {  # where each document came from: a reindex changes the vectors, not that
                    str(r[0]): tuple(r[1:])
                    for r in self._db.execute(
                        f"SELECT doc_cid, {', '.join(_SOURCE_COLUMNS)} FROM documents WHERE corpus = ?",
                        (name,),
                    )
                }
                self._db.execute("DELETE FROM documents WHERE corpus = ?", (name,))
                self._db.executemany(
                    f"INSERT INTO documents ({_DOC_COLUMNS}, {', '.join(_SOURCE_COLUMNS)}) "
                    "VALUES (?, ?, 'complete', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            name,
                            w.doc_cid,
                            len(w.ids),
                            w.text_bytes,
                            w.language,
                            created,
                            w.tokens,
                            w.title,
                            w.metadata_json,
                            *kept.get(w.doc_cid, (None, None, None, created)),
                        )
                        for w in writes
                    ],
                )
                self._db.execute(  # a corpus whose collection was lost is created again
                    "INSERT OR REPLACE INTO corpora VALUES (?, ?, ?, ?, ?)",
                    (name, embedding_model, dim, SCHEMA_VERSION, created),
                )
                self._db.execute("INSERT OR REPLACE INTO reindex_swaps VALUES (?)", (name,))
            self._pending.pop(name, None)
            self._collections.pop(name, None)
            self._exact.pop(name, None)
            self._keys.pop(name, None)
            self._too_big.discard(name)
            self._exact_gen[name] = self._exact_gen.get(name, 0) + 1
            self._finish_swap(name)
            total = sum(len(w.ids) for w in writes)
            if 0 < total <= self._exact_budget - self._exact_used(besides=name):
                index = ExactIndex(dim)  # from memory: no query has to load it from ChromaDB
                index.add(
                    [i for w in writes for i in w.ids],
                    np.concatenate([w.vectors for w in writes]),
                    [t for w in writes for t in w.texts],
                    [m for w in writes for m in w.metadatas],
                )
                self._exact[name] = index
        return self.info(name)

    def _finish_swap(self, name: str) -> None:
        """Put the rebuilt collection of ``name`` in place of the old one (caller holds the lock)."""
        from chromadb.errors import NotFoundError

        with _chroma_errors("swap in the rebuilt collection"):
            try:
                staged = self._client.get_collection(staging_collection_name(name), embedding_function=None)
            except NotFoundError:
                staged = None  # already renamed before a crash
            if staged is not None:
                with contextlib.suppress(NotFoundError):
                    self._client.delete_collection(collection_name(name))
                staged.modify(name=collection_name(name))
        self._db.execute("DELETE FROM reindex_swaps WHERE corpus = ?", (name,))

    def _collection_settings(
        self, name: str, embedding_model: str, dim: int, created: float
    ) -> dict[str, Any]:
        """How a corpus's collection is made (a new corpus, or its rebuild by a reindex)."""
        return {
            "configuration": {"hnsw": {"space": "cosine", **self._hnsw}},
            "metadata": {
                "hn_corpus": name,
                "embedding_model": embedding_model,
                "dim": dim,
                "schema_version": SCHEMA_VERSION,
                "created_at": created,
            },
        }

    def _write_document(self, col: Any, doc: _DocumentWrite) -> None:
        """All of one document's chunks into ``col``, in writes of at most the batch size."""
        for a in range(0, len(doc.ids), self._batch):
            part = slice(a, a + self._batch)
            self._write_batch(col, doc.ids[part], doc.vectors[part], doc.texts[part], doc.metadatas[part])

    def _write_batch(
        self, col: Any, ids: list[str], vecs: np.ndarray, docs: list[str], metas: list[Any]
    ) -> None:
        """One Chroma write (a seam for the crash test)."""
        with _chroma_errors("add chunks"):
            col.upsert(ids=ids, embeddings=vecs, documents=docs, metadatas=metas)

    def _delete_batch(self, col: Any, ids: list[str]) -> None:
        """One Chroma delete (a seam for the crash test)."""
        with _chroma_errors("delete chunks"):
            col.delete(ids=ids)

    def add_document(
        self,
        name: str,
        chunks: Sequence[Chunk],
        embeddings: np.ndarray,
        *,
        source: DocumentSource | None = None,
    ) -> None:
        """Add all chunks of one document atomically; a no-op if it is already complete.

        ``source`` (file name, pages, who asked) is kept in the ledger for ``rag.list_documents``.
        """
        col = self._collection(name)
        doc = _DocumentWrite.of(chunks, embeddings, self.info(name).dim)
        doc_cid, ids, vecs = doc.doc_cid, doc.ids, doc.vectors
        with self._lock:
            st = self._status(name, doc_cid)
            if st is not None and st[0] == "complete":
                return
            if doc_cid in self._pending.get(name, ()):
                raise BadRequest(
                    f"document {doc_cid} is being written to corpus {name!r} by another call; "
                    "try again when it is done"
                )
            self._pending.setdefault(name, set()).add(doc_cid)  # ours until the finally below
        try:
            if st is not None:
                # left by an undo that failed: its chunks (perhaps other ids) must not come back
                self._purge(name, doc_cid)
            src = source or DocumentSource()
            with self._lock:
                now = time.time()
                self._db.execute(
                    f"INSERT OR REPLACE INTO documents ({_DOC_COLUMNS}, {', '.join(_SOURCE_COLUMNS)}) "
                    "VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        name,
                        doc_cid,
                        len(ids),
                        doc.text_bytes,
                        doc.language,
                        now,
                        doc.tokens,
                        doc.title,
                        doc.metadata_json,
                        src.filename,
                        src.pages,
                        src.ingested_by,
                        now,
                    ),
                )
            self._write_document(col, doc)
            with self._lock:
                done = self._db.execute(
                    "UPDATE documents SET status = 'complete', updated_at = ? "
                    "WHERE corpus = ? AND doc_cid = ? AND status = 'pending'",
                    (time.time(), name, doc_cid),
                )
                if done.rowcount != 1:
                    raise InternalError(f"document {doc_cid} left the ledger while it was being written")
                self._keys.pop(name, None)
                self._exact_gen[name] = self._exact_gen.get(name, 0) + 1
                self._exact_added(name, ids, vecs, doc.texts, doc.metadatas)
        except BaseException as exc:
            if isinstance(exc, _CollectionGone):
                self._forget_handle(name)
            # Undo the partial document; a second failure while undoing must not hide the first
            # (recover() finishes the job at the next start).
            with contextlib.suppress(Exception):
                self._purge(name, doc_cid)
            if isinstance(exc, Exception):
                full = self._out_of_space(exc, needed=doc.text_bytes + vecs.nbytes)
                if full is not None:
                    raise full from exc
            raise
        finally:
            with self._lock:
                self._pending.get(name, set()).discard(doc_cid)
        _log.info("rag_document_added", corpus=name, doc_cid=doc_cid, chunks=len(chunks))

    def _out_of_space(self, exc: Exception, *, needed: int) -> CapacityExceeded | None:
        """A clear ``capacity_exceeded`` when a write failed because the disk is full.

        SQLite says so by error code, the OS by errno; ChromaDB's native layer
        only by message, so for it the free space left on the store's disk decides.
        """
        cause: BaseException | None = exc
        by_code = False
        while cause is not None and not by_code:
            if isinstance(cause, sqlite3.Error) and getattr(cause, "sqlite_errorcode", None) == _SQLITE_FULL:
                by_code = True
            elif isinstance(cause, OSError) and cause.errno in _NO_SPACE_ERRNOS:
                by_code = True
            cause = cause.__cause__ or cause.__context__
        try:
            free = shutil.disk_usage(self.root).free
        except OSError:
            free = -1
        if not by_code and not (0 <= free < max(needed, _MIN_FREE_BYTES)):
            return None
        return CapacityExceeded(
            f"the corpus store under {self.root} is out of disk space ({max(free, 0)} bytes free, "
            f"about {needed} needed): free some space, then ingest again; nothing was stored"
        )

    def _purge(self, name: str, doc_cid: str, *, announce: bool = False) -> int:
        """Delete every chunk of ``doc_cid`` from Chroma, then its ledger row.

        ``announce``: a ``rag.delete``, whose event is still to be appended: a marker committed
        with the ``deleting`` status says so until :meth:`deletion_announced`.
        """
        col = self._collection(name)
        with self._lock:
            with transaction(self._db):
                self._db.execute(
                    "UPDATE documents SET status = 'deleting' WHERE corpus = ? AND doc_cid = ?",
                    (name, doc_cid),
                )
                if announce:
                    self._db.execute("INSERT OR IGNORE INTO deletions VALUES (?, ?)", (name, doc_cid))
            self._keys.pop(name, None)
            self._exact_gen[name] = self._exact_gen.get(name, 0) + 1
            index = self._exact.get(name)
            if index is not None:
                index.remove_doc(doc_cid)
            self._too_big.clear()  # space was freed: every corpus may be tried again
        with _chroma_errors("delete chunks"):
            found = col.get(where={"doc_cid": doc_cid}, include=[])
        ids = list(found["ids"])
        for a in range(0, len(ids), self._batch):
            self._delete_batch(col, ids[a : a + self._batch])
        with self._lock:
            self._db.execute("DELETE FROM documents WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))
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
            if self._status(name, doc_cid) is None:
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
            return (
                self._db.execute("SELECT 1 FROM documents WHERE doc_cid = ? LIMIT 1", (doc_cid,)).fetchone()
                is not None
            )

    def pending_deletions(self) -> list[tuple[str, str]]:
        """``(corpus, doc_cid)`` of deletes done (or finished by :meth:`recover`) but not yet announced."""
        with self._lock:
            return [
                (str(c), str(d))
                for c, d in self._db.execute("SELECT corpus, doc_cid FROM deletions ORDER BY corpus, doc_cid")
            ]

    def deletion_announced(self, name: str, doc_cid: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM deletions WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))

    def list_documents(
        self, name: str, *, after: str = "", limit: int = 200
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of the corpus's complete documents by ``doc_cid`` (those after ``after``), and how
        many it has in all: ``{doc_cid, title, filename, pages, chunks, language, ingested_by,
        ingested_at}`` (``None`` where the ledger predates the field)."""
        validate_corpus_name(name)
        with self._lock:
            if self._row(name) is None:
                raise NotFound(f"corpus {name!r} does not exist")
            rows = self._db.execute(
                "SELECT doc_cid, title, filename, pages, chunks, language, ingested_by, "
                "COALESCE(ingested_at, updated_at) FROM documents "
                "WHERE corpus = ? AND status = 'complete' AND doc_cid > ? ORDER BY doc_cid LIMIT ?",
                (name, after, limit),
            ).fetchall()
            (total,) = self._db.execute(
                "SELECT COUNT(*) FROM documents WHERE corpus = ? AND status = 'complete'", (name,)
            ).fetchone()
        docs = [
            {
                "doc_cid": str(cid),
                "title": str(title),
                "filename": filename,
                "pages": pages,
                "chunks": int(chunks),
                "language": language,
                "ingested_by": by,
                "ingested_at": float(at),
            }
            for cid, title, filename, pages, chunks, language, by, at in rows
        ]
        return docs, int(total)

    def metadata_keys(self, name: str) -> frozenset[str] | None:
        """The metadata keys the corpus's complete documents have, or ``None`` if unknown (a
        document from before the ledger kept metadata).  From the ledger, cached until a
        document of the corpus completes or goes."""
        with self._lock:
            if name in self._keys:
                return self._keys[name]
            keys: set[str] | None = set(CHUNK_KEYS)
            for meta, has_file in self._db.execute(
                "SELECT DISTINCT metadata, filename IS NOT NULL FROM documents "
                "WHERE corpus = ? AND status = 'complete'",
                (name,),
            ):
                if meta is None:
                    keys = None
                    break
                assert keys is not None
                keys.update(json.loads(meta))
                if has_file:
                    keys.add("doc_filename")
            found = None if keys is None else frozenset(keys)
            self._keys[name] = found
            return found

    def recover(self) -> dict[str, int]:
        """Delete chunks of documents not marked complete; returns chunks removed per corpus.

        A corpus whose collection is gone (e.g. a reindex killed after dropping it)
        is dropped from the ledger first; on a ChromaDB server it is kept as it
        is (see :meth:`_collection`) and its unfinished documents wait for it.
        """
        from chromadb.errors import NotFoundError

        with self._lock:
            swaps = [str(r[0]) for r in self._db.execute("SELECT corpus FROM reindex_swaps")]
            for name in swaps:
                self._finish_swap(name)
                _log.warning("rag_reindex_swap_finished", corpus=name)
        for name in self.corpora():  # a rebuild that never reached its swap: the old corpus stands
            with _chroma_errors("drop an unfinished rebuild"), contextlib.suppress(NotFoundError):
                self._client.delete_collection(staging_collection_name(name))
        missing = set()
        for name in self.corpora():
            try:
                self._collection(name)
            except NotFound:
                missing.add(name)
        with self._lock:
            rows = self._db.execute(
                "SELECT corpus, doc_cid FROM documents WHERE status != 'complete' ORDER BY corpus, doc_cid"
            ).fetchall()
            busy = {(c, d) for c, docs in self._pending.items() for d in docs}
        out: dict[str, int] = {}
        for corpus, doc_cid in rows:
            if (corpus, doc_cid) in busy or corpus in missing:
                continue
            out[corpus] = out.get(corpus, 0) + self._purge(str(corpus), str(doc_cid))
        return out

    # ----------------------------------------------------------------- queries

    def query(
        self,
        name: str,
        embedding: np.ndarray,
        *,
        k: int,
        where: Mapping[str, Any] | None = None,
        include_text: bool = True,
    ) -> list[ScoredChunk]:
        """The ``k`` most similar chunks; ``where`` is a ``rag.query`` filter (see :func:`build_where`)."""
        try:
            return self._query(name, embedding, k=k, where=where, include_text=include_text)
        except _CollectionGone:
            self._forget_handle(name)  # then the corpus as it is now: rebuilt, or gone (NotFound)
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
    ) -> list[ScoredChunk] | None:
        """:meth:`query`'s answer if it can be given at once from the in-memory copy, else ``None``.

        For the event loop (no thread hop): never waits for the store lock (a
        write holding it gives ``None``), never reads ChromaDB or the ledger,
        and searches only a copy of at most ``max_floats`` vector components
        (the matrix product is most of the cost).  ``None`` too when the corpus
        has no copy or no known collection handle, and for a filtered query (its
        walk down the ranking is Python, as long as the filter is selective):
        :meth:`query` then decides.
        """
        if where or not self._lock.acquire(blocking=False):
            return None
        try:
            index = self._exact.get(name)
            known = name in self._collections
        finally:
            self._lock.release()
        if index is None or not known or len(index) * index.dim > max_floats:
            return None
        return index.search(_query_vector(embedding, index.dim, k), k, include_text=include_text)

    def _forget_handle(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)

    def _query(
        self,
        name: str,
        embedding: np.ndarray,
        *,
        k: int,
        where: Mapping[str, Any] | None,
        include_text: bool,
    ) -> list[ScoredChunk]:
        col = self._collection(name)
        with self._lock:
            cached = self._exact.get(name)  # kept with the corpus's row: no ledger read then
            row = None if cached is not None else self._row(name)
        if cached is not None:
            dim = cached.dim
        elif row is None:
            raise NotFound(f"corpus {name!r} does not exist")
        else:
            dim = row[1]
        vec = _query_vector(embedding, dim, k)
        clause = build_where(where) if where else None
        index = self._exact_index(name, col)
        if index is not None:
            matches = None if clause is None else compile_where(clause)
            return index.search(vec, k, matches, include_text=include_text)
        return self._hnsw_query(col, name, vec, k, clause, include_text)

    # ----------------------------------------------------------------- HNSW search

    def _hnsw_query(
        self,
        col: Any,
        name: str,
        vec: np.ndarray,
        k: int,
        clause: Mapping[str, Any] | None,
        include_text: bool,
    ) -> list[ScoredChunk]:
        """ChromaDB's search; only chunks of documents complete in the ledger are answered.

        ChromaDB is queried without the store lock, so a document may start or
        fail to be written meanwhile: documents known not to be complete are
        excluded from the query, and every hit is checked against the ledger
        afterwards (and against ``clause`` with :func:`where_matches`, which
        defines the filter).  Too few hits left: ask for more.
        """
        with self._lock:
            hidden = set(self._pending.get(name, ()))
            hidden |= {
                str(r[0])
                for r in self._db.execute(
                    "SELECT doc_cid FROM documents WHERE corpus = ? AND status != 'complete'", (name,)
                )
            }
            complete, stored = self._db.execute(
                "SELECT COALESCE(SUM(CASE WHEN status = 'complete' THEN chunks ELSE 0 END), 0), "
                "COALESCE(SUM(chunks), 0) FROM documents WHERE corpus = ?",
                (name,),
            ).fetchone()
        if not complete:
            return []
        if clause is not None:
            hits = self._overfetch_then_filter(col, name, vec, k, clause, include_text, int(complete))
            if hits is not None:
                return hits
        where = None if clause is None else chroma_where(clause)
        if hidden:
            hide: dict[str, Any] = {"doc_cid": {"$nin": sorted(hidden)}}
            where = hide if where is None else {"$and": [where, hide]}
        include = ["metadatas", "distances", *(["documents"] if include_text else [])]
        # Hits may still fail the exact check (a widened clause, a document not complete):
        # ask for more, but never for more than MAX_RECHECKED candidates in all, so that
        # one query cannot hold a store thread for seconds (it then returns fewer than k).
        n, limit = k, min(max(k, int(stored)), max(k, MAX_RECHECKED))
        matches = None if clause is None else compile_where(clause)
        while True:
            with _chroma_errors("query"):
                res = col.query(query_embeddings=[vec], n_results=n, where=where, include=include)
            got = _scored(res, include_text)
            matching = [h for h in got if matches is None or matches(h.metadata)]
            hits = self._complete_only(name, matching)
            if len(hits) >= k or len(got) < n or n >= limit:
                return hits[:k]
            n = min(n * 4, limit)

    def _complete_only(self, name: str, hits: list[ScoredChunk]) -> list[ScoredChunk]:
        """The hits whose document is complete in the ledger now."""
        cids = sorted({str(h.metadata.get("doc_cid")) for h in hits})
        complete: set[str] = set()
        with self._lock:
            for a in range(0, len(cids), 500):
                part = cids[a : a + 500]
                complete.update(
                    str(r[0])
                    for r in self._db.execute(
                        "SELECT doc_cid FROM documents WHERE corpus = ? AND status = 'complete' "
                        f"AND doc_cid IN ({', '.join('?' * len(part))})",
                        (name, *part),
                    )
                )
        return [h for h in hits if h.metadata.get("doc_cid") in complete]

    # ----------------------------------------------------------------- exact search

    def _exact_used(self, besides: str | None = None) -> int:
        return sum(len(ix) for name, ix in self._exact.items() if name != besides)

    def _exact_added(
        self,
        name: str,
        ids: list[str],
        vecs: np.ndarray,
        texts: list[str],
        metas: Sequence[Mapping[str, Any]],
    ) -> None:
        """Keep a loaded exact index equal to the corpus (caller holds the lock)."""
        index = self._exact.get(name)
        if index is None:
            return
        if self._exact_used() + len(ids) > self._exact_budget:
            del self._exact[name]  # grew past the budget: HNSW from now on
            self._too_big.add(name)
            return
        index.add(ids, vecs, texts, metas)

    def _exact_index(self, name: str, col: Any) -> ExactIndex | None:
        """The corpus's exact index, loading it if the corpus fits the budget; else ``None``.

        The load reads ChromaDB without holding the store lock (a 10k-chunk
        corpus takes ~1.4 s here), then installs the copy only if no document
        of the corpus completed or started deleting meanwhile; otherwise this
        query uses HNSW and a later one loads again.  One load per corpus at a
        time: queries arriving meanwhile use HNSW instead of loading (and
        holding in memory) a copy each.
        """
        with self._lock:
            index = self._exact.get(name)
            if index is not None or name in self._too_big or self._exact_budget == 0:
                return index
            if name in self._exact_loading:
                return None
            self._exact_loading.add(name)
        try:
            return self._load_exact(name, col)
        finally:
            with self._lock:
                self._exact_loading.discard(name)

    def _load_exact(self, name: str, col: Any) -> ExactIndex | None:
        """:meth:`_exact_index`'s load (the caller marked ``name`` as loading)."""
        with self._lock:
            row = self._row(name)
            if row is None:
                return None
            complete = {
                str(r[0]): int(r[1])
                for r in self._db.execute(
                    "SELECT doc_cid, chunks FROM documents WHERE corpus = ? AND status = 'complete'", (name,)
                )
            }
            total = sum(complete.values())
            if total > self._exact_budget - self._exact_used(besides=name):
                self._too_big.add(name)
                return None
            generation = self._exact_gen.get(name, 0)
        # Chunks of documents being written now are in Chroma but not complete: skipped.
        ids: list[str] = []
        vectors: list[np.ndarray] = []
        texts: list[str] = []
        metas: list[Mapping[str, Any]] = []
        offset = 0
        with _chroma_errors("load corpus for exact search"):
            while True:
                got = col.get(
                    include=["embeddings", "documents", "metadatas"], limit=self._batch, offset=offset
                )
                if not got["ids"]:
                    break
                offset += len(got["ids"])
                keep = [i for i, m in enumerate(got["metadatas"]) if (m or {}).get("doc_cid") in complete]
                ids += [got["ids"][i] for i in keep]
                vectors.append(np.asarray(got["embeddings"], dtype=np.float32)[keep])
                texts += [got["documents"][i] or "" for i in keep]
                metas += [got["metadatas"][i] or {} for i in keep]
        index = ExactIndex(row[1])
        if ids:  # one copy into the index, not one growing concatenation per page
            index.add(ids, np.concatenate(vectors), texts, metas)
        with self._lock:
            if self._exact_gen.get(name, 0) != generation or name in self._exact:
                return self._exact.get(name)  # changed meanwhile: not this copy
            if len(index) != total:
                # The ledger and Chroma disagree (should not happen): trust neither copy, use HNSW.
                _log.warning("rag_exact_index_mismatch", corpus=name, ledger=total, loaded=len(index))
                self._too_big.add(name)
                return None
            if total > self._exact_budget - self._exact_used(besides=name):
                self._too_big.add(name)
                return None
            self._exact[name] = index
        _log.info("rag_exact_index_loaded", corpus=name, chunks=total, bytes=index.nbytes)
        return index

    def warm_exact(self) -> list[str]:
        """Load the exact index of every corpus that fits the budget (blocking); returns their names.

        A corpus that cannot be loaded is logged and left to HNSW: it never stops the others.
        """
        loaded = []
        for name in self.corpora():
            try:
                if self._exact_index(name, self._collection(name)) is not None:
                    loaded.append(name)
            except BusError as exc:
                _log.warning("rag_exact_warm_failed", corpus=name, code=exc.code, error=exc.message)
        return loaded

    def _overfetch_then_filter(
        self,
        col: Any,
        name: str,
        vec: np.ndarray,
        k: int,
        clause: Mapping[str, Any],
        include_text: bool,
        total: int,
    ) -> list[ScoredChunk] | None:
        """Filtered search without ChromaDB's pre-filter (slow at 100k: it scans metadata first).

        Take the ``OVERFETCH`` nearest chunks unfiltered and keep those matching
        the clause (of complete documents): if at least ``k`` match, they are
        exactly the filtered top-k (any closer match would be among the nearest).
        Otherwise ``None``, and the caller runs the filtered query.
        """
        n = min(max(k * OVERFETCH_FACTOR, OVERFETCH_MIN), total)
        if n <= k:
            return None
        with _chroma_errors("query"):
            # Metadata only: the texts of the few chunks kept are fetched afterwards.
            res = col.query(query_embeddings=[vec], n_results=n, include=["metadatas", "distances"])
        matches = compile_where(clause)
        matching = [h for h in _scored(res, False) if matches(h.metadata)]
        hits = self._complete_only(name, matching)[:k]
        if len(hits) < k:
            return None
        if not include_text:
            return hits
        with _chroma_errors("query"):
            got = col.get(ids=[h.chunk_id for h in hits], include=["documents"])
        texts = dict(zip(got["ids"], got.get("documents") or [], strict=False))
        return [ScoredChunk(h.chunk_id, texts.get(h.chunk_id), h.metadata, h.score) for h in hits]

    def close(self) -> None:
        """Release the writer lock and the ledger (idempotent)."""
        with self._lock:
            self._collections.clear()
            self._exact.clear()
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._writer.release()

    def __enter__(self) -> CorpusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
