"""The state every part of the blob store works on: its directories, the SQLite index (schema,
recovery on open), the lock, the chunks being written and the chunks transfers still bring;
atomic file writes and index helpers.  :class:`~hearthnet.blobs.store.BlobStore` is this core
with its writes (:mod:`.writes`), reads (:mod:`.reads`) and space (:mod:`.space`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Self

from hearthnet.blobs.cid import CHUNK_SIZE, cid_hex, is_cid
from hearthnet.blobs.disk import DirSync, disk_full_is_capacity, fsync_dir, write_temp
from hearthnet.blobs.manifest import MAX_CHUNK_SIZE
from hearthnet.errors import NotFound
from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["DEFAULT_STALE_AFTER_S", "BlobInfo", "CorruptBlob", "StoreCore"]

DEFAULT_STALE_AFTER_S: Final = 24 * 3600.0
"""Incomplete unpinned manifests and unreferenced chunks older than this are collected by ``gc``."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS blobs (
    doc_cid    TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    pinned     INTEGER NOT NULL DEFAULT 0,
    complete   INTEGER NOT NULL DEFAULT 0,
    last_used  INTEGER NOT NULL,
    changed_at REAL NOT NULL,
    private    INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS blob_chunks (
    doc_cid  TEXT NOT NULL,
    idx      INTEGER NOT NULL,
    chunk_id TEXT NOT NULL,
    PRIMARY KEY (doc_cid, idx)
);
CREATE INDEX IF NOT EXISTS blob_chunks_by_chunk ON blob_chunks (chunk_id);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id TEXT PRIMARY KEY,
    size     INTEGER NOT NULL,
    added_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class CorruptBlob(NotFound):
    """A stored chunk or blob failed verification; it was quarantined and can be refetched."""


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One document known to the store (``last_used`` is a monotonic use counter)."""

    doc_cid: str
    size: int
    pinned: bool
    complete: bool
    last_used: int
    private: bool = False
    """Only this node reads it: peers are told it is not here (``file.read``, ``file.list``)."""


class StoreCore:
    """The state of one blob store and what every part of it uses (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        *,
        chunk_size: int = CHUNK_SIZE,
        cap_bytes: int | None = None,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise ValueError(f"chunk_size must be in [1, {MAX_CHUNK_SIZE}]")
        if cap_bytes is not None and cap_bytes < 0:
            raise ValueError("cap_bytes must be >= 0")
        self.root = Path(root)
        self.chunk_size = chunk_size
        self.cap_bytes = cap_bytes
        self.stale_after_s = stale_after_s
        self._clock = clock
        self._chunks_dir = self.root / "chunks"
        self._manifests_dir = self.root / "manifests"
        self._tmp_dir = self.root / "tmp"
        self._quarantine_dir = self.root / "quarantine"
        for d in (self._chunks_dir, self._manifests_dir, self._tmp_dir, self._quarantine_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # Chunks being written by a put in progress: delete/gc must not remove them.
        self._inflight: Counter[str] = Counter()
        # Transfers from peers in progress, by doc_cid: the chunks they still bring count
        # against the cap, so concurrent puts cannot each fit alone and overshoot together.
        self._reserved: dict[str, dict[str, int]] = {}
        """doc_cid -> {chunk_id: size} of the chunks its transfer still brings (shrinks as they land)."""
        self._made_dirs: set[Path] = set()
        self._db = sqlite3.connect(self.root / "index.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(blobs)")}
        if "private" not in columns:  # a store made before blobs could be private
            self._db.execute("ALTER TABLE blobs ADD COLUMN private INTEGER NOT NULL DEFAULT 0")
        self._recover()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recover(self) -> None:
        """Drop leftover temp files and reconcile the chunk index with ``chunks/``."""
        for leftover in self._tmp_dir.iterdir():
            with contextlib.suppress(OSError):
                leftover.unlink()
        on_disk: dict[str, int] = {}
        for path in self._chunks_dir.glob("*/*/*"):
            cid = "blake3:" + path.name
            if is_cid(cid):
                on_disk[cid] = path.stat().st_size
        with self._lock, transaction(self._db):
            indexed = {row[0] for row in self._db.execute("SELECT chunk_id FROM chunks")}
            now = self._clock()
            for cid in indexed - on_disk.keys():
                self._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (cid,))
            for cid in on_disk.keys() - indexed:
                self._db.execute("INSERT INTO chunks VALUES (?, ?, ?)", (cid, on_disk[cid], now))
            # A complete blob whose chunk vanished is incomplete again (refetchable).
            self._db.execute(
                "UPDATE blobs SET complete = 0, changed_at = ? WHERE complete = 1 AND doc_cid IN ("
                " SELECT bc.doc_cid FROM blob_chunks bc LEFT JOIN chunks c USING (chunk_id)"
                " WHERE c.chunk_id IS NULL)",
                (now,),
            )

    def _tick(self) -> int:
        """Next value of the monotonic LRU counter (inside a transaction)."""
        self._db.execute(
            "INSERT INTO meta VALUES ('clock', 1) ON CONFLICT(key) DO UPDATE SET value = value + 1"
        )
        row = self._db.execute("SELECT value FROM meta WHERE key = 'clock'").fetchone()
        return int(row[0])

    def chunk_path(self, chunk_id: str) -> Path:
        """Where the chunk ``chunk_id`` is (or would be) stored."""
        h = cid_hex(chunk_id)
        return self._chunks_dir / h[:2] / h[2:4] / h

    def _manifest_path(self, doc_cid: str) -> Path:
        return self._manifests_dir / f"{cid_hex(doc_cid)}.msgpack"

    def _atomic_write(
        self, dest: Path, parts: tuple[bytes | memoryview, ...], pending_dirs: DirSync | None = None
    ) -> None:
        """Write to ``tmp/``, fsync, rename onto ``dest``, fsync the directory.

        With ``pending_dirs`` the directory fsync is left to the caller (batched
        before the manifest is registered): the rename's durability may wait, the
        content of whatever is under ``dest`` is already on disk.
        """
        parent = dest.parent
        with disk_full_is_capacity(self.root, sum(len(p) for p in parts)):
            if parent not in self._made_dirs:  # a full disk can refuse the directory too
                parent.mkdir(parents=True, exist_ok=True)
                self._made_dirs.add(parent)
            tmp_name = write_temp(self._tmp_dir, parts, fsync=True)
            try:
                with self._lock:  # renames are ordered against quarantine and delete
                    os.replace(tmp_name, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)
                raise
        if pending_dirs is None:
            fsync_dir(parent)
            return
        pending_dirs.add(parent)

    @property
    def tmp_dir(self) -> Path:
        """Where temporary files are written before they are renamed into place (same file system)."""
        return self._tmp_dir

    def hold(self, chunk_ids: list[str]) -> None:
        """Mark chunks as being written: a delete or ``gc`` leaves them alone until :meth:`release`."""
        with self._lock:
            self._inflight.update(chunk_ids)

    def release(self, chunk_ids: list[str]) -> None:
        """Chunks :meth:`hold` marked are written (or given up)."""
        with self._lock:
            self._inflight.subtract(chunk_ids)
            for cid in chunk_ids:
                if self._inflight[cid] <= 0:
                    del self._inflight[cid]

    def _unindexed(self, chunk_ids: tuple[str, ...]) -> int:
        """How many distinct ``chunk_ids`` have no row in the chunk index (lock held)."""
        wanted = list(dict.fromkeys(chunk_ids))
        return len(wanted) - len(self._indexed(wanted))

    def _rows_over(self, query: str, ids: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """The rows of ``query`` (``{marks}`` stands for an ``IN`` list) over ``ids``, 500 at a
        time (lock held)."""
        for a in range(0, len(ids), 500):
            part = ids[a : a + 500]
            yield from self._db.execute(query.format(marks=", ".join("?" * len(part))), part)

    def _sum_over(self, query: str, ids: Sequence[str]) -> int:
        """``query`` (one number per ``IN`` list) summed over ``ids`` (lock held)."""
        return sum(int(row[0]) for row in self._rows_over(query, ids))

    def _indexed(self, chunk_ids: Sequence[str]) -> set[str]:
        """Which of ``chunk_ids`` have a row in the chunk index."""
        with self._lock:
            return {
                row[0]
                for row in self._rows_over(
                    "SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks})", chunk_ids
                )
            }

    # ------------------------------------------------------------------ lifecycle

    @contextlib.contextmanager
    def _durable(self) -> Iterator[None]:
        """The transaction inside is on disk when it commits, even through a power loss.

        The index runs ``synchronous=NORMAL`` (WAL): cheap commits for the many chunk
        rows, but the last ones may roll back after a power loss.  A blob's
        registration and its pin are what callers are told succeeded (an import, a
        put): those commits sync the log, which makes every earlier row durable too.
        """
        with self._lock:
            self._db.execute("PRAGMA synchronous=FULL")
            try:
                yield
            finally:
                self._db.execute("PRAGMA synchronous=NORMAL")
