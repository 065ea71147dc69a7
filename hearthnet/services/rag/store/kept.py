"""Vectors an ingest has already paid for, kept beside the ledger until their document is written.

An ingest embeds a document's chunks batch by batch and writes the document only at the end (it
appears whole or not at all).  A kill, a reboot or a power cut in between used to lose every
vector: the next ingest of the book embedded it all again.  Each batch's vectors are therefore
kept here as they come (``kept.sqlite3`` in the store directory, never searched), keyed by the
model and a digest of the chunk's text; the next ingest of the document takes the vectors it
finds and embeds only the rest.  A document's rows go once it is written (or after
``KEEP_DAYS`` when it never is).

Thread-safe: one connection, used under a lock, from worker threads only.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["KEEP_DAYS", "KeptVectors", "text_digest"]

KEEP_DAYS = 14.0
"""Vectors of a document never written again are dropped after this many days."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kept (
    model TEXT NOT NULL, digest BLOB NOT NULL, doc_cid TEXT NOT NULL,
    vector BLOB NOT NULL, kept_at REAL NOT NULL,
    PRIMARY KEY (model, digest));
CREATE INDEX IF NOT EXISTS kept_by_doc ON kept (doc_cid);
"""


def text_digest(text: str) -> bytes:
    """What a chunk's vector is kept under (with the model): 16 bytes of BLAKE2b of its text."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class KeptVectors:
    """``kept.sqlite3``: chunk vectors embedded for documents not yet written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("DELETE FROM kept WHERE kept_at < ?", (time.time() - KEEP_DAYS * 86400,))

    def lookup(self, model: str, digests: Sequence[bytes]) -> dict[bytes, npt.NDArray[np.float32]]:
        """The kept vectors among ``digests`` (of texts embedded with ``model``)."""
        if not digests:
            return {}
        marks = ",".join("?" * len(digests))
        with self._lock:
            rows = self._db.execute(
                f"SELECT digest, vector FROM kept WHERE model = ? AND digest IN ({marks})",
                (model, *digests),
            ).fetchall()
        return {bytes(d): np.frombuffer(v, dtype="<f4").astype(np.float32) for d, v in rows}

    def keep(self, model: str, rows: Sequence[tuple[bytes, str, npt.NDArray[np.float32]]]) -> None:
        """``(digest, doc_cid, vector)`` rows embedded with ``model``, kept in one transaction."""
        now = time.time()
        values = [(model, d, doc, np.ascontiguousarray(v, dtype="<f4").tobytes(), now) for d, doc, v in rows]
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany("INSERT OR REPLACE INTO kept VALUES (?, ?, ?, ?, ?)", values)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def count(self, doc_cid: str) -> int:
        """Vectors kept for ``doc_cid`` (tests, progress)."""
        with self._lock:
            (n,) = self._db.execute("SELECT COUNT(*) FROM kept WHERE doc_cid = ?", (doc_cid,)).fetchone()
        return int(n)

    def drop(self, doc_cids: Sequence[str]) -> None:
        """Forget the vectors of documents now written (their vectors are in the corpus)."""
        with self._lock:
            self._db.executemany("DELETE FROM kept WHERE doc_cid = ?", [(d,) for d in doc_cids])

    def close(self) -> None:
        with self._lock:
            self._db.close()
