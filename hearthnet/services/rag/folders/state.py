"""The watcher's own small state (SQLite, blocking: called from worker threads): the folders it
watches, and per file its size, mtime, content hash (its ``doc_cid``), status and reason.

A file is ``indexed`` (its document is in the corpus), ``pending`` (seen, not yet indexed: new,
changed, settling, or its host was busy or away) or ``failed`` (its ingest was refused: the reason
is kept until the file changes).  After a restart a file whose size and mtime are those recorded
is not read again.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["FileRow", "FolderRow", "FolderState", "Stat"]

INDEXED = "indexed"
PENDING = "pending"
FAILED = "failed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS folders (
    path TEXT PRIMARY KEY, corpus TEXT NOT NULL, added_at REAL NOT NULL, from_config INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS files (
    folder TEXT NOT NULL, rel TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    doc_cid TEXT, status TEXT NOT NULL, reason TEXT, changed_at REAL NOT NULL,
    PRIMARY KEY (folder, rel)
);
CREATE INDEX IF NOT EXISTS files_by_cid ON files (folder, doc_cid);
"""


@dataclass(frozen=True)
class Stat:
    """What a file's metadata says of its content without reading it."""

    size: int
    mtime_ns: int


@dataclass(frozen=True)
class FolderRow:
    path: str
    corpus: str
    added_at: float
    from_config: bool


@dataclass(frozen=True)
class FileRow:
    rel: str
    stat: Stat
    doc_cid: str | None
    status: str
    reason: str | None
    changed_at: float


class FolderState:
    """``folders.sqlite`` in the node's home: one connection, its writers serialised by a lock."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, transaction(self._db):
            yield self._db

    # folders -------------------------------------------------------------------------------------
    def folders(self) -> list[FolderRow]:
        with self._lock:
            rows = self._db.execute("SELECT path, corpus, added_at, from_config FROM folders ORDER BY path")
            return [FolderRow(str(p), str(c), float(a), bool(f)) for p, c, a, f in rows]

    def add_folder(self, path: str, corpus: str, *, from_config: bool) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO folders VALUES (?, ?, ?, ?) ON CONFLICT (path) DO UPDATE SET "
                "corpus = excluded.corpus, from_config = excluded.from_config",
                (path, corpus, time.time(), int(from_config)),
            )

    def remove_folder(self, path: str) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM folders WHERE path = ?", (path,))
            db.execute("DELETE FROM files WHERE folder = ?", (path,))

    def forget_files(self, folder: str) -> None:
        """Every file row of ``folder`` (its corpus changed: all its files are new to the new one)."""
        with self._tx() as db:
            db.execute("DELETE FROM files WHERE folder = ?", (folder,))

    # files ---------------------------------------------------------------------------------------
    def files(self, folder: str) -> dict[str, FileRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT rel, size, mtime_ns, doc_cid, status, reason, changed_at FROM files WHERE folder = ?",
                (folder,),
            ).fetchall()
        return {
            str(r): FileRow(str(r), Stat(int(s), int(m)), d, str(st), why, float(at))
            for r, s, m, d, st, why, at in rows
        }

    def put(self, folder: str, rows: Iterable[FileRow]) -> None:
        """Record ``rows`` (one transaction)."""
        with self._tx() as db:
            db.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (folder, r.rel, r.stat.size, r.stat.mtime_ns, r.doc_cid, r.status, r.reason, r.changed_at)
                    for r in rows
                ],
            )

    def drop(self, folder: str, rels: Iterable[str]) -> None:
        with self._tx() as db:
            db.executemany("DELETE FROM files WHERE folder = ? AND rel = ?", [(folder, r) for r in rels])
