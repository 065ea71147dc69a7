"""The store's ledger: a small SQLite database beside the vectors that says which documents of
which corpora are complete, being written or being deleted (what makes a document's write and
delete atomic), with each corpus's model and each document's source.  One process writes a
store directory at a time (:class:`WriterLock`).

Not thread-safe on its own: :class:`~hearthnet.services.rag.store.store.CorpusStore` holds its
lock around every call.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hearthnet.contracts.folders import SOURCE_PATH
from hearthnet.errors import BadRequest
from hearthnet.runtime.sqlite_tx import transaction
from hearthnet.services.rag.search import fulltext
from hearthnet.services.rag.store.write import DocumentSource, DocumentWrite

__all__ = ["SCHEMA_VERSION", "CorpusRecord", "CorpusRow", "Ledger", "WriterLock"]

SCHEMA_VERSION = 1

_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS metadata_updates (
    corpus TEXT NOT NULL, doc_cid TEXT NOT NULL, announce INTEGER NOT NULL, PRIMARY KEY (corpus, doc_cid));
"""
# ``reindex_swaps``: corpora whose rebuilt collection is committed in the ledger but may not yet
# have replaced the old one in ChromaDB (``recover`` finishes the swap).
# ``metadata``: the caller's document metadata as JSON (reused by a reindex); NULL in ledgers
# written before it existed, where it is read back from one of the document's chunks.
# ``deletions``: documents whose delete (``rag.delete``) is under way or done but not yet announced:
# marked in the transaction that starts the delete, cleared once the event is appended (see
# ``pending_deletions``), so a kill between the two still ends with the event.
# ``metadata_updates``: documents whose new title and metadata (``rag.update``) are in the ledger but
# perhaps not yet in every chunk in ChromaDB, or not yet announced (``announce``): marked in the
# transaction that changes the ledger, cleared when both are done (``recover`` finishes a kill).
# ``filename, pages, ingested_by, ingested_at``: what ``rag.list_documents`` shows (NULL in ledgers
# written before they existed); kept by a reindex.
_DOC_COLUMNS = "corpus, doc_cid, status, chunks, text_bytes, language, updated_at, tokens, title, metadata"
_SOURCE_COLUMNS = {"filename": "TEXT", "pages": "INTEGER", "ingested_by": "TEXT", "ingested_at": "REAL"}
_SOURCES = ", ".join(_SOURCE_COLUMNS)


class WriterLock:
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


@dataclass(frozen=True)
class CorpusRow:
    embedding_model: str
    dim: int
    schema_version: int
    created_at: float


@dataclass(frozen=True)
class CorpusRecord:
    """What the store knows about a corpus (counts from the ledger)."""

    name: str
    docs: int
    chunks: int
    size_bytes: int
    language_majority: str | None
    embedding_model: str
    dim: int
    schema_version: int


class Ledger:
    """``root/ledger.sqlite3`` (WAL, synchronous=FULL), migrated from older layouts on open."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            self._db.executescript(fulltext.SCHEMA)
            columns = {str(r[1]) for r in self._db.execute("PRAGMA table_info(documents)")}
            if "metadata" not in columns:  # a ledger from before document metadata was kept
                self._db.execute("ALTER TABLE documents ADD COLUMN metadata TEXT")
            for column, kind in _SOURCE_COLUMNS.items():  # ... and before documents were listed
                if column not in columns:
                    self._db.execute(f"ALTER TABLE documents ADD COLUMN {column} {kind}")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()

    # corpora ---------------------------------------------------------------------------------
    def corpus(self, name: str) -> CorpusRow | None:
        row = self._db.execute(
            "SELECT embedding_model, dim, schema_version, created_at FROM corpora WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else CorpusRow(str(row[0]), int(row[1]), int(row[2]), float(row[3]))

    def corpora(self) -> list[str]:
        return [str(r[0]) for r in self._db.execute("SELECT name FROM corpora ORDER BY name")]

    def add_corpus(self, name: str, embedding_model: str, dim: int, created: float) -> None:
        """A new corpus, with its (empty) keyword index."""
        with transaction(self._db):
            self._db.execute(
                "INSERT INTO corpora VALUES (?, ?, ?, ?, ?)",
                (name, embedding_model, dim, SCHEMA_VERSION, created),
            )
            fulltext.drop_index(self._db, name)  # rows a corpus of that name left behind
            fulltext.create_index(self._db, name)

    def forget_corpus(self, name: str) -> None:
        with transaction(self._db):
            self._db.execute("DELETE FROM documents WHERE corpus = ?", (name,))
            self._db.execute("DELETE FROM corpora WHERE name = ?", (name,))
            fulltext.drop_index(self._db, name)

    # the keyword index -----------------------------------------------------------------------
    def keyword_missing(self) -> list[str]:
        """Corpora without a complete keyword index (made before it existed, or its build cut short)."""
        return [
            str(r[0])
            for r in self._db.execute(
                "SELECT name FROM corpora WHERE name NOT IN (SELECT corpus FROM keyword_corpora) "
                "ORDER BY name"
            )
        ]

    def build_keywords(self, name: str, chunks: Iterable[tuple[str, str, str, Mapping[str, Any]]]) -> None:
        """In one transaction: the corpus's keyword index made anew from ``chunks`` (``(doc_cid,
        chunk_id, text, metadata)`` of its complete documents, as ChromaDB holds them)."""
        with transaction(self._db):
            fulltext.drop_index(self._db, name)
            fulltext.create_index(self._db, name)
            for doc_cid, chunk_id, text, metadata in chunks:
                fulltext.add_document(self._db, name, doc_cid, [chunk_id], [text], [metadata])

    def sizes(self, name: str) -> tuple[int, int, int]:
        """``(documents, chunks, text bytes)`` of the corpus's complete documents."""
        docs, chunks, text_bytes = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(chunks), 0), COALESCE(SUM(text_bytes), 0) FROM documents "
            "WHERE corpus = ? AND status = 'complete'",
            (name,),
        ).fetchone()
        return int(docs), int(chunks), int(text_bytes)

    def language_majority(self, name: str) -> str | None:
        row = self._db.execute(
            "SELECT language FROM documents WHERE corpus = ? AND status = 'complete' "
            "GROUP BY language ORDER BY SUM(chunks) DESC, language LIMIT 1",
            (name,),
        ).fetchone()
        return None if row is None else row[0]

    # documents -------------------------------------------------------------------------------
    def status(self, name: str, doc_cid: str) -> tuple[str, int] | None:
        """A document's status and chunk count, if the ledger has it."""
        row = self._db.execute(
            "SELECT status, chunks FROM documents WHERE corpus = ? AND doc_cid = ?", (name, doc_cid)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def tokens(self, name: str, doc_cid: str) -> int:
        """Estimated tokens indexed for a complete document (0 if absent)."""
        row = self._db.execute(
            "SELECT tokens FROM documents WHERE corpus = ? AND doc_cid = ? AND status = 'complete'",
            (name, doc_cid),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def complete_documents(self, name: str, doc_cid: str | None = None) -> list[tuple[Any, ...]]:
        """``(doc_cid, title, language, chunks, tokens, metadata JSON, filename)`` of the complete
        documents (or of ``doc_cid``), by ``doc_cid``."""
        one = "" if doc_cid is None else " AND doc_cid = ?"
        return self._db.execute(
            "SELECT doc_cid, title, language, chunks, tokens, metadata, filename FROM documents "
            f"WHERE corpus = ? AND status = 'complete'{one} ORDER BY doc_cid",
            (name,) if doc_cid is None else (name, doc_cid),
        ).fetchall()

    def complete_chunks(self, name: str) -> dict[str, int]:
        """doc_cid -> chunks, of the corpus's complete documents."""
        return {
            str(r[0]): int(r[1])
            for r in self._db.execute(
                "SELECT doc_cid, chunks FROM documents WHERE corpus = ? AND status = 'complete'", (name,)
            )
        }

    def page(self, name: str, *, after: str, limit: int) -> tuple[list[dict[str, Any]], int]:
        """A page of complete documents by ``doc_cid`` and how many there are in all (see
        ``CorpusStore.list_documents``)."""
        rows = self._db.execute(
            "SELECT doc_cid, title, filename, pages, chunks, language, ingested_by, "
            "COALESCE(ingested_at, updated_at), metadata FROM documents "
            "WHERE corpus = ? AND status = 'complete' AND doc_cid > ? ORDER BY doc_cid LIMIT ?",
            (name, after, limit),
        ).fetchall()
        (total,) = self._db.execute(
            "SELECT COUNT(*) FROM documents WHERE corpus = ? AND status = 'complete'", (name,)
        ).fetchone()
        docs = []
        for cid, title, filename, pages, chunks, language, by, at, meta in rows:
            metadata = metadata_json(meta) or {}
            docs.append(
                {
                    "doc_cid": str(cid),
                    "title": str(title),
                    "filename": filename,
                    "pages": pages,
                    "chunks": int(chunks),
                    "language": language,
                    "ingested_by": by,
                    "ingested_at": float(at),
                    # the file a watched folder ingested it from (specs/folders.md)
                    "source_path": metadata.get(SOURCE_PATH),
                    "metadata": metadata,  # the caller's fields (ingest --meta, docs set)
                }
            )
        return docs, int(total)

    def metadata_of(self, name: str) -> Iterable[tuple[str | None, bool]]:
        """Each distinct ``(metadata JSON, has a file name)`` of the corpus's complete documents."""
        return self._db.execute(
            "SELECT DISTINCT metadata, filename IS NOT NULL FROM documents "
            "WHERE corpus = ? AND status = 'complete'",
            (name,),
        ).fetchall()

    def not_complete(self, name: str) -> set[str]:
        """Documents being written or deleted."""
        return {
            str(r[0])
            for r in self._db.execute(
                "SELECT doc_cid FROM documents WHERE corpus = ? AND status != 'complete'", (name,)
            )
        }

    def chunk_counts(self, name: str) -> tuple[int, int]:
        """``(chunks of complete documents, chunks of every document)`` of the corpus."""
        complete, stored = self._db.execute(
            "SELECT COALESCE(SUM(CASE WHEN status = 'complete' THEN chunks ELSE 0 END), 0), "
            "COALESCE(SUM(chunks), 0) FROM documents WHERE corpus = ?",
            (name,),
        ).fetchone()
        return int(complete), int(stored)

    def complete_among(self, name: str, doc_cids: Sequence[str]) -> set[str]:
        """Those of ``doc_cids`` that are complete now."""
        cids = sorted(set(doc_cids))
        complete: set[str] = set()
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
        return complete

    def unfinished(self) -> list[tuple[str, str]]:
        """``(corpus, doc_cid)`` of every document not complete (a writer or a delete cut short)."""
        return [
            (str(c), str(d))
            for c, d in self._db.execute(
                "SELECT corpus, doc_cid FROM documents WHERE status != 'complete' ORDER BY corpus, doc_cid"
            )
        ]

    def holds(self, doc_cid: str) -> bool:
        """Whether any corpus has (or is writing) ``doc_cid``."""
        return (
            self._db.execute("SELECT 1 FROM documents WHERE doc_cid = ? LIMIT 1", (doc_cid,)).fetchone()
            is not None
        )

    # the atomic write and delete of one document --------------------------------------------------
    def begin_write(self, name: str, doc: DocumentWrite, source: DocumentSource, now: float) -> None:
        """Record the document as ``pending`` before any of its chunks is written."""
        self._db.execute(
            f"INSERT OR REPLACE INTO documents ({_DOC_COLUMNS}, {_SOURCES}) "
            "VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                name,
                doc.doc_cid,
                len(doc.ids),
                doc.text_bytes,
                doc.language,
                now,
                doc.tokens,
                doc.title,
                doc.metadata_json,
                source.filename,
                source.pages,
                source.ingested_by,
                now,
            ),
        )

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction (one commit, one fsync) around several documents' statements."""
        with transaction(self._db):
            yield

    def complete(self, name: str, doc: DocumentWrite, now: float) -> bool:
        """Flip a ``pending`` document to ``complete`` and index its keywords (inside :meth:`batch`:
        both in one transaction); False (and nothing indexed) if it was not pending any more."""
        done = self._db.execute(
            "UPDATE documents SET status = 'complete', updated_at = ? "
            "WHERE corpus = ? AND doc_cid = ? AND status = 'pending'",
            (now, name, doc.doc_cid),
        )
        if done.rowcount == 1 and fulltext.has_index(self._db, name):
            fulltext.add_document(self._db, name, doc.doc_cid, doc.ids, doc.texts, doc.metadatas)
        return done.rowcount == 1

    def begin_delete(self, name: str, doc_cid: str, *, announce: bool) -> None:
        """Mark the document ``deleting`` (and, with ``announce``, owed an announcement) at once."""
        with transaction(self._db):
            self._db.execute(
                "UPDATE documents SET status = 'deleting' WHERE corpus = ? AND doc_cid = ?", (name, doc_cid)
            )
            fulltext.remove_document(self._db, name, doc_cid)
            if announce:
                self._db.execute("INSERT OR IGNORE INTO deletions VALUES (?, ?)", (name, doc_cid))

    def mark_replaced(self, name: str, doc_cid: str, announce: bool) -> bool:
        """A complete document marked ``deleting`` inside the caller's transaction (:meth:`batch`),
        the one that completes the document replacing it; whether it was complete."""
        done = self._db.execute(
            "UPDATE documents SET status = 'deleting' "
            "WHERE corpus = ? AND doc_cid = ? AND status = 'complete'",
            (name, doc_cid),
        )
        if done.rowcount != 1:
            return False
        fulltext.remove_document(self._db, name, doc_cid)
        if announce:
            self._db.execute("INSERT OR IGNORE INTO deletions VALUES (?, ?)", (name, doc_cid))
        return True

    def remove(self, name: str, doc_cid: str) -> None:
        with transaction(self._db):
            self._db.execute("DELETE FROM documents WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))
            self._db.execute("DELETE FROM metadata_updates WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))
            fulltext.remove_document(self._db, name, doc_cid)

    def pending_deletions(self) -> list[tuple[str, str]]:
        return [
            (str(c), str(d))
            for c, d in self._db.execute("SELECT corpus, doc_cid FROM deletions ORDER BY corpus, doc_cid")
        ]

    def deletion_announced(self, name: str, doc_cid: str) -> None:
        self._db.execute("DELETE FROM deletions WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))

    # a document's title and metadata changed (``rag.update``) ------------------------------------------
    def update_metadata(
        self,
        name: str,
        doc_cid: str,
        *,
        title: str,
        metadata: Mapping[str, Any],
        filename: str | None,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        announce: bool,
    ) -> bool:
        """In one transaction: the complete document's new title, metadata and file name, its
        keyword rows' chunk metadata (``change`` of each), and the marker that the rest is owed;
        False (nothing changed) if it is not complete."""
        with transaction(self._db):
            done = self._db.execute(
                "UPDATE documents SET title = ?, metadata = ?, filename = ? "
                "WHERE corpus = ? AND doc_cid = ? AND status = 'complete'",
                (title, json.dumps(dict(metadata), sort_keys=True), filename, name, doc_cid),
            )
            if done.rowcount != 1:
                return False
            fulltext.update_metadata(self._db, name, doc_cid, change)
            self._db.execute(
                "INSERT INTO metadata_updates VALUES (?, ?, ?) ON CONFLICT (corpus, doc_cid) "
                "DO UPDATE SET announce = MAX(announce, excluded.announce)",
                (name, doc_cid, int(announce)),
            )
        return True

    def pending_updates(self) -> list[tuple[str, str, bool]]:
        """``(corpus, doc_cid, announce)`` of updates not yet wholly written or announced."""
        return [
            (str(c), str(d), bool(a))
            for c, d, a in self._db.execute(
                "SELECT corpus, doc_cid, announce FROM metadata_updates ORDER BY corpus, doc_cid"
            )
        ]

    def update_written(self, name: str, doc_cid: str) -> None:
        """The chunks hold it: only an announcement, if one is owed, keeps the marker."""
        self._db.execute(
            "DELETE FROM metadata_updates WHERE corpus = ? AND doc_cid = ? AND announce = 0", (name, doc_cid)
        )

    def update_announced(self, name: str, doc_cid: str) -> None:
        self._db.execute("DELETE FROM metadata_updates WHERE corpus = ? AND doc_cid = ?", (name, doc_cid))

    # the corpus swap of a reindex ---------------------------------------------------------------------
    def replace(
        self, name: str, writes: Sequence[DocumentWrite], *, embedding_model: str, dim: int, created: float
    ) -> None:
        """In one transaction: the corpus's documents become ``writes`` (each keeping where it came
        from), its model ``embedding_model``, and a swap marker says the collection is to replace."""
        with transaction(self._db):
            kept = {  # where each document came from: a reindex changes the vectors, not that
                str(r[0]): tuple(r[1:])
                for r in self._db.execute(
                    f"SELECT doc_cid, {_SOURCES} FROM documents WHERE corpus = ?", (name,)
                )
            }
            self._db.execute("DELETE FROM documents WHERE corpus = ?", (name,))
            self._db.executemany(
                f"INSERT INTO documents ({_DOC_COLUMNS}, {_SOURCES}) "
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
            fulltext.drop_index(self._db, name)  # the keyword index is rebuilt with the vectors
            fulltext.create_index(self._db, name)
            for w in writes:
                fulltext.add_document(self._db, name, w.doc_cid, w.ids, w.texts, w.metadatas)
            self._db.execute("INSERT OR REPLACE INTO reindex_swaps VALUES (?)", (name,))

    def swaps(self) -> list[str]:
        """Corpora whose swap is committed but perhaps not done in ChromaDB."""
        return [str(r[0]) for r in self._db.execute("SELECT corpus FROM reindex_swaps")]

    def swap_owed(self, name: str) -> bool:
        return (
            self._db.execute("SELECT 1 FROM reindex_swaps WHERE corpus = ?", (name,)).fetchone() is not None
        )

    def swap_done(self, name: str) -> None:
        self._db.execute("DELETE FROM reindex_swaps WHERE corpus = ?", (name,))


def metadata_json(meta: str | None) -> dict[str, Any] | None:
    """A document's metadata from the ledger, or ``None`` for a row from before it was kept."""
    return None if meta is None else dict(json.loads(meta))
