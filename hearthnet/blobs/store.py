"""The on-disk, content-addressed blob store (blocking API).

Layout under ``root`` (see ``specs/blobs.md``)::

    chunks/ab/cd/<64 hex>       one file per chunk, named by its BLAKE3
    manifests/<64 hex>.msgpack  one canonical manifest per document
    tmp/                        temporary files; renamed into place when complete
    quarantine/                 chunks that failed verification on read
    index.sqlite3               pins, completeness, LRU counter, chunk sizes, references

Files are the truth for bytes; the SQLite index is the truth for state
(pinned, complete, last used) and is reconciled with ``chunks/`` on open.
Every write goes temp file -> fsync -> rename -> fsync directory, so a crash
never leaves a file under ``chunks/`` or ``manifests/`` whose content does not
match its name.  Every chunk is hashed on write and on every read.

All methods are blocking and thread-safe; the node calls them through
``anyio.to_thread``.  Memory stays bounded by a few chunks whatever the blob size.
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import os
import shutil
import sqlite3
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from hearthnet.blobs.cid import CHUNK_SIZE, CidHasher, chunk_cid, cid_hex, is_cid, parse_cid
from hearthnet.blobs.manifest import MAX_CHUNK_SIZE, Manifest, ManifestBuilder, manifest_for_bytes
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound

__all__ = [
    "DEFAULT_STALE_AFTER_S",
    "BlobInfo",
    "BlobStore",
    "CorruptBlob",
    "IncomingChunks",
    "ReassemblyCheck",
]

DEFAULT_STALE_AFTER_S: Final = 24 * 3600.0
"""Incomplete unpinned manifests and unreferenced chunks older than this are collected by ``gc``."""

_MAX_PENDING_DIRS: Final = 1024
"""Directory fsyncs batched by one put before they are flushed (bounds memory)."""
INCOMING_GROUP: Final = 16
"""Chunks an :class:`IncomingChunks` writes before making them durable together (4 MiB)."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS blobs (
    doc_cid    TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    pinned     INTEGER NOT NULL DEFAULT 0,
    complete   INTEGER NOT NULL DEFAULT 0,
    last_used  INTEGER NOT NULL,
    changed_at REAL NOT NULL
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


class ReassemblyCheck:
    """Hashes the chunks of one manifest as they stream past, to spare re-reading them.

    Feed every chunk in manifest order (:meth:`feed`); :meth:`matches` is true
    only if exactly the manifest's chunks came, in order, each of its exact
    length, and their concatenation hashes to ``doc_cid``.  Anything else
    (a gap, a repeat, a resumed transfer) simply does not match, and
    :meth:`BlobStore.complete` reads the stored chunks back instead.
    """

    __slots__ = ("_broken", "_hasher", "_manifest", "_next")

    def __init__(self, manifest: Manifest) -> None:
        self._manifest = manifest
        self._hasher = CidHasher()
        self._next = 0
        self._broken = False

    def feed(self, chunk_id: str, data: bytes) -> None:
        """The next chunk that passed (its id is verified separately, when it is stored)."""
        m, i = self._manifest, self._next
        if self._broken or i >= len(m.chunks) or m.chunks[i] != chunk_id or len(data) != m.chunk_length(i):
            self._broken = True
            return
        self._hasher.update(data)
        self._next = i + 1

    def matches(self, manifest: Manifest) -> bool:
        """Whether exactly ``manifest``'s chunks were fed, in order, and hash to its ``doc_cid``."""
        return (
            not self._broken
            and manifest == self._manifest
            and self._next == len(manifest.chunks)
            and self._hasher.cid() == manifest.doc_cid
        )


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """One document known to the store (``last_used`` is a monotonic use counter)."""

    doc_cid: str
    size: int
    pinned: bool
    complete: bool
    last_used: int


def _verify_chunk(chunk_id: str, data: bytes) -> None:
    """``BadRequest`` unless ``data`` is a chunk of allowed size whose BLAKE3 id is ``chunk_id``."""
    parse_cid(chunk_id)
    if len(data) > MAX_CHUNK_SIZE:
        raise BadRequest(f"chunk of {len(data)} bytes exceeds the {MAX_CHUNK_SIZE} byte limit")
    actual = chunk_cid(data)
    if actual != chunk_id:
        raise BadRequest(f"chunk does not match its id: expected {chunk_id}, got {actual}")


_NO_SPACE: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_SQLITE_FULL: Final = 13


@contextlib.contextmanager
def _disk_full_is_capacity(root: Path, needed: int) -> Iterator[None]:
    """A write that fails because the disk (or a quota) is full is ``capacity_exceeded``, not a crash."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        full = (
            exc.errno in _NO_SPACE
            if isinstance(exc, OSError)
            else getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
        )
        if not full:
            raise
        try:
            free = shutil.disk_usage(root).free
        except OSError:
            free = 0
        raise CapacityExceeded(
            f"the blob store under {root} is out of disk space ({free} bytes free, about {needed} "
            "more needed): free some space, then send again (whole chunks already stored are kept "
            "and not sent again)"
        ) from exc


class _DirSync:
    """Directories whose renames still await an fsync, during one local put.

    A chunk's *content* is fsynced before its rename either way; deferring the
    directory fsync only lets the rename's durability wait until :meth:`flush`,
    which the writer calls before it registers the blob.  A crash before that
    can lose a renamed chunk (it is then missing and written again), never
    leave a wrong one.
    """

    def __init__(self) -> None:
        self._dirs: set[Path] = set()

    def add(self, directory: Path) -> None:
        self._dirs.add(directory)
        if len(self._dirs) >= _MAX_PENDING_DIRS:
            self.flush()

    def flush(self) -> None:
        """fsync every directory added so far (blocking)."""
        dirs, self._dirs = self._dirs, set()
        for d in dirs:
            _fsync_dir(d)


def _write_temp(tmp_dir: Path, parts: tuple[bytes | memoryview, ...], *, fsync: bool) -> str:
    """Write ``parts`` to a new file in ``tmp_dir`` (fsynced if asked); its path, or nothing left behind."""
    fd, tmp = tempfile.mkstemp(dir=tmp_dir, prefix="w-")
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    return tmp


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_bounded(path: Path) -> bytes | None:
    """The file's bytes, or ``None`` if it is larger than any valid chunk."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_CHUNK_SIZE:
            return None
        data = f.read(size + 1)  # +1: a file that grew since fstat still fails its hash
    assert isinstance(data, bytes)
    return data if len(data) <= MAX_CHUNK_SIZE else None


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Read up to ``n`` bytes, short only at end of file."""
    data = f.read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class BlobStore:
    """Content-addressed chunk store with manifests, pinning and LRU garbage collection."""

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
        self._made_dirs: set[Path] = set()
        self._db = sqlite3.connect(self.root / "index.sqlite3", check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._recover()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> BlobStore:
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
        with self._lock, self._tx():
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

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """One SQLite transaction; the caller holds ``self._lock``."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _tick(self) -> int:
        """Next value of the monotonic LRU counter (inside a transaction)."""
        self._db.execute(
            "INSERT INTO meta VALUES ('clock', 1) ON CONFLICT(key) DO UPDATE SET value = value + 1"
        )
        row = self._db.execute("SELECT value FROM meta WHERE key = 'clock'").fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ paths and atomic files

    def _chunk_path(self, chunk_id: str) -> Path:
        h = cid_hex(chunk_id)
        return self._chunks_dir / h[:2] / h[2:4] / h

    def _manifest_path(self, doc_cid: str) -> Path:
        return self._manifests_dir / f"{cid_hex(doc_cid)}.msgpack"

    def _atomic_write(
        self, dest: Path, parts: tuple[bytes | memoryview, ...], pending_dirs: _DirSync | None = None
    ) -> None:
        """Write to ``tmp/``, fsync, rename onto ``dest``, fsync the directory.

        With ``pending_dirs`` the directory fsync is left to the caller (batched
        before the manifest is registered): the rename's durability may wait, the
        content of whatever is under ``dest`` is already on disk.
        """
        parent = dest.parent
        if parent not in self._made_dirs:
            parent.mkdir(parents=True, exist_ok=True)
            self._made_dirs.add(parent)
        with _disk_full_is_capacity(self.root, sum(len(p) for p in parts)):
            tmp_name = _write_temp(self._tmp_dir, parts, fsync=True)
            try:
                with self._lock:  # renames are ordered against quarantine and delete
                    os.replace(tmp_name, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name)
                raise
        if pending_dirs is None:
            _fsync_dir(parent)
            return
        pending_dirs.add(parent)

    # ------------------------------------------------------------------ writing

    def put_chunk(self, chunk_id: str, data: bytes) -> bool:
        """Store one chunk after checking ``chunk_cid(data) == chunk_id``.

        Returns ``False`` if an intact copy (same size) was already stored.
        A wrong id is :class:`BadRequest` and nothing is written.
        """
        _verify_chunk(chunk_id, data)
        with self._lock:
            self._inflight[chunk_id] += 1
        try:
            return self._store_verified_chunk(chunk_id, data)
        finally:
            self._release([chunk_id])

    def _release(self, chunk_ids: list[str]) -> None:
        with self._lock:
            self._inflight.subtract(chunk_ids)
            for cid in chunk_ids:
                if self._inflight[cid] <= 0:
                    del self._inflight[cid]

    def _store_verified_chunk(
        self, chunk_id: str, data: bytes | memoryview, pending_dirs: _DirSync | None = None
    ) -> bool:
        """Write a chunk whose hash the caller has checked; caller marked it in flight."""
        path = self._chunk_path(chunk_id)
        try:
            present = path.stat().st_size == len(data)
        except FileNotFoundError:
            present = False
        if not present:
            self._atomic_write(path, (data,), pending_dirs)
        with self._lock, self._tx():
            self._db.execute(
                "INSERT INTO chunks VALUES (?, ?, ?)"
                " ON CONFLICT(chunk_id) DO UPDATE SET size = excluded.size",
                (chunk_id, len(data), self._clock()),
            )
        return not present

    def incoming(self, group: int = INCOMING_GROUP) -> IncomingChunks:
        """A writer for the chunks of one blob arriving from a peer (see :class:`IncomingChunks`)."""
        return IncomingChunks(self, group)

    def put_bytes(self, data: bytes, *, pin: bool = False) -> Manifest:
        """Store ``data`` as a complete blob; returns its manifest."""
        self.check_quota(len(data))
        manifest = manifest_for_bytes(data, self.chunk_size)
        view = memoryview(data)
        held: list[str] = []
        dirs = _DirSync()
        try:
            for i, cid in enumerate(manifest.chunks):
                with self._lock:
                    self._inflight[cid] += 1
                held.append(cid)
                start = i * self.chunk_size
                self._store_verified_chunk(cid, view[start : start + self.chunk_size], dirs)
            dirs.flush()
            self._register(manifest, pin=pin, complete=True)
        finally:
            self._release(held)
        return manifest

    def put_file(self, path: Path, *, pin: bool = False) -> Manifest:
        """Stream the file at ``path`` into the store (memory bounded by one chunk)."""
        self.check_quota(Path(path).stat().st_size)
        builder = ManifestBuilder(self.chunk_size)
        held: list[str] = []
        dirs = _DirSync()
        try:
            with open(path, "rb") as f:
                while chunk := _read_exact(f, self.chunk_size):
                    cid = builder.add(chunk)  # hashes the chunk and feeds the document hash
                    with self._lock:
                        self._inflight[cid] += 1
                    held.append(cid)
                    self._store_verified_chunk(cid, chunk, dirs)
            dirs.flush()
            manifest = builder.build()
            self._register(manifest, pin=pin, complete=True)
        finally:
            self._release(held)
        return manifest

    def put_manifest(self, manifest: Manifest, *, pin: bool = False) -> None:
        """Record a (validated) manifest received from a peer; its chunks may still be missing."""
        if not isinstance(manifest, Manifest):
            raise BadRequest("put_manifest needs a Manifest")
        with self._lock:
            known = self._db.execute("SELECT 1 FROM blobs WHERE doc_cid = ?", (manifest.doc_cid,)).fetchone()
        if known is None:
            self.check_quota(manifest.size)
        self._register(manifest, pin=pin, complete=False)

    def _register(self, manifest: Manifest, *, pin: bool, complete: bool) -> None:
        """Write the manifest file and its index rows (pin and complete only ever turn on here)."""
        path = self._manifest_path(manifest.doc_cid)
        with self._lock:
            row = self._db.execute("SELECT size FROM blobs WHERE doc_cid = ?", (manifest.doc_cid,)).fetchone()
            existing = None
            if row is not None:
                with contextlib.suppress(CorruptBlob):  # a damaged file is simply rewritten
                    existing = self._read_manifest_file(manifest.doc_cid)
            if existing is not None and existing != manifest and not complete:
                # Keep what we have; a peer's differently chunked manifest is not merged in.
                return
            if existing != manifest:
                self._atomic_write(path, (manifest.to_bytes(),))
            with self._tx():
                tick = self._tick()
                now = self._clock()
                if row is None or existing != manifest:
                    self._db.execute("DELETE FROM blob_chunks WHERE doc_cid = ?", (manifest.doc_cid,))
                    self._db.executemany(
                        "INSERT INTO blob_chunks VALUES (?, ?, ?)",
                        ((manifest.doc_cid, i, c) for i, c in enumerate(manifest.chunks)),
                    )
                self._db.execute(
                    "INSERT INTO blobs VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(doc_cid) DO UPDATE SET"
                    " size = excluded.size, pinned = max(pinned, excluded.pinned),"
                    " complete = max(complete, excluded.complete), last_used = excluded.last_used,"
                    " changed_at = excluded.changed_at",
                    (manifest.doc_cid, manifest.size, int(pin), int(complete), tick, now),
                )

    def missing_chunks(self, manifest: Manifest) -> list[str]:
        """Ids of ``manifest``'s chunks not stored yet, in manifest order, without repeats."""
        out: list[str] = []
        seen: set[str] = set()
        for cid in manifest.chunks:
            if cid not in seen and not self.has_chunk(cid):
                out.append(cid)
            seen.add(cid)
        return out

    def complete(self, doc_cid: str, *, reassembly: ReassemblyCheck | None = None) -> Manifest:
        """Check that all chunks are present and reassemble to ``doc_cid``; mark the blob complete.

        Missing chunks -> :class:`BadRequest` (the manifest stays, fetch the rest).
        A reassembly that does not hash to ``doc_cid`` -> the manifest is dropped
        and :class:`BadRequest` raised.  A corrupt chunk -> :class:`CorruptBlob`.

        ``reassembly``: the writer saw every chunk of this manifest, in order,
        and hashed them as they passed; if it matched, the chunks are not read
        back (they were each verified against their ids when stored).
        """
        manifest = self.get_manifest(doc_cid)
        missing = self.missing_chunks(manifest)
        if missing:
            raise BadRequest(f"blob {doc_cid} is missing {len(missing)} of {len(manifest.chunks)} chunks")
        if reassembly is None or not reassembly.matches(manifest):
            self._check_reassembly(manifest)
        with self._lock, self._tx():
            tick = self._tick()
            self._db.execute(
                "UPDATE blobs SET complete = 1, last_used = ?, changed_at = ? WHERE doc_cid = ?",
                (tick, self._clock(), doc_cid),
            )
        return manifest

    def _check_reassembly(self, manifest: Manifest) -> None:
        """Read the stored chunks back in order and compare their hash with ``doc_cid``."""
        doc_cid = manifest.doc_cid
        hasher = CidHasher()
        for i, cid in enumerate(manifest.chunks):
            data = self._read_chunk(cid)
            if len(data) != manifest.chunk_length(i):
                self.delete(doc_cid)
                raise BadRequest(f"manifest for {doc_cid} has a chunk of the wrong length; dropped")
            hasher.update(data)
        if hasher.cid() != doc_cid:
            self.delete(doc_cid)
            raise BadRequest(f"chunks do not reassemble to {doc_cid}; manifest dropped")

    # ------------------------------------------------------------------ reading

    def has_blob(self, doc_cid: str) -> bool:
        """Whether a complete manifest for ``doc_cid`` is stored."""
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT complete FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
        return row is not None and bool(row[0])

    def has_chunk(self, chunk_id: str) -> bool:
        return self._chunk_path(chunk_id).is_file()

    def _read_manifest_file(self, doc_cid: str) -> Manifest | None:
        try:
            data = self._manifest_path(doc_cid).read_bytes()
        except FileNotFoundError:
            return None
        try:
            manifest = Manifest.from_bytes(data)
        except BadRequest as exc:
            raise CorruptBlob(f"manifest of {doc_cid} is corrupt on disk") from exc
        if manifest.doc_cid != doc_cid:
            raise CorruptBlob(f"manifest file of {doc_cid} names another document")
        return manifest

    def get_manifest(self, doc_cid: str) -> Manifest:
        """The stored manifest (complete or not); :class:`NotFound` if unknown."""
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT 1 FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
            manifest = self._read_manifest_file(doc_cid) if row is not None else None
        if manifest is None:
            raise NotFound(f"no manifest for {doc_cid}")
        return manifest

    def _read_chunk(self, chunk_id: str) -> bytes:
        """Read and verify one chunk; quarantine and raise :class:`CorruptBlob` on mismatch."""
        path = self._chunk_path(chunk_id)
        try:
            data = _read_bounded(path)
        except FileNotFoundError:
            raise NotFound(f"chunk {chunk_id} is not stored") from None
        if data is not None and chunk_cid(data) == chunk_id:
            return data
        return self._quarantine(chunk_id, path)

    def _quarantine(self, chunk_id: str, path: Path) -> bytes:
        """Move a chunk that failed its hash out of ``chunks/`` and raise :class:`CorruptBlob`.

        Re-checked under the lock first: a concurrent refetch may have replaced it.
        """
        with self._lock:
            try:
                data = _read_bounded(path)
                if data is not None and chunk_cid(data) == chunk_id:
                    return data
            except FileNotFoundError:
                pass
            dest = self._quarantine_dir / f"{cid_hex(chunk_id)}.{time.time_ns()}"
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, dest)
            with self._tx():
                self._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (chunk_id,))
                self._db.execute(
                    "UPDATE blobs SET complete = 0, changed_at = ? WHERE doc_cid IN"
                    " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)",
                    (self._clock(), chunk_id),
                )
        raise CorruptBlob(f"chunk {chunk_id} is corrupt and was quarantined; refetch it")

    def _touch_blobs_of_chunk(self, chunk_id: str) -> None:
        with self._lock, self._tx():
            tick = self._tick()
            self._db.execute(
                "UPDATE blobs SET last_used = ? WHERE doc_cid IN"
                " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)",
                (tick, chunk_id),
            )

    def touch(self, doc_cid: str) -> None:
        """Mark ``doc_cid`` as most recently used."""
        with self._lock, self._tx():
            tick = self._tick()
            self._db.execute("UPDATE blobs SET last_used = ? WHERE doc_cid = ?", (tick, doc_cid))

    def get_chunk(self, chunk_id: str, *, touch: bool = True) -> bytes:
        """One verified chunk; :class:`NotFound` if absent, :class:`CorruptBlob` if it failed its hash.

        ``touch=False`` leaves the LRU order alone (a caller streaming a whole
        blob touches it once with :meth:`touch` instead of once per chunk).
        """
        parse_cid(chunk_id)
        data = self._read_chunk(chunk_id)
        if touch:
            self._touch_blobs_of_chunk(chunk_id)
        return data

    def _complete_manifest(self, doc_cid: str) -> Manifest:
        manifest = self.get_manifest(doc_cid)
        if not self.has_blob(doc_cid):
            raise NotFound(f"blob {doc_cid} is not complete")
        return manifest

    def iter_blob(self, doc_cid: str) -> Iterator[bytes]:
        """The blob's bytes chunk by chunk, each verified.

        The whole-document hash is checked after the last chunk; on mismatch
        :class:`CorruptBlob` is raised instead of finishing, so a consumer must
        treat the data as provisional until the iterator is exhausted.
        """
        manifest = self._complete_manifest(doc_cid)
        self.touch(doc_cid)
        return self._iter_verified(manifest)

    def _iter_verified(self, manifest: Manifest) -> Iterator[bytes]:
        hasher = CidHasher()
        for i, cid in enumerate(manifest.chunks):
            data = self._read_chunk(cid)
            if len(data) != manifest.chunk_length(i):
                self._mark_incomplete(manifest.doc_cid)
                raise CorruptBlob(f"blob {manifest.doc_cid} has a chunk of the wrong length")
            hasher.update(data)
            yield data
        if hasher.cid() != manifest.doc_cid:
            self._mark_incomplete(manifest.doc_cid)
            raise CorruptBlob(f"blob {manifest.doc_cid} does not reassemble to its cid")

    def _mark_incomplete(self, doc_cid: str) -> None:
        with self._lock, self._tx():
            self._db.execute(
                "UPDATE blobs SET complete = 0, changed_at = ? WHERE doc_cid = ?", (self._clock(), doc_cid)
            )

    def read_blob(self, doc_cid: str, *, max_bytes: int = 256 * 1024 * 1024) -> bytes:
        """The whole verified blob in memory; :class:`BadRequest` if larger than ``max_bytes``."""
        manifest = self._complete_manifest(doc_cid)
        if manifest.size > max_bytes:
            raise BadRequest(f"blob {doc_cid} is {manifest.size} bytes, over the {max_bytes} byte limit")
        self.touch(doc_cid)
        return b"".join(self._iter_verified(manifest))

    def export(self, doc_cid: str, dest: Path) -> None:
        """Write the verified blob to ``dest`` atomically (temp file beside it, then rename)."""
        manifest = self._complete_manifest(doc_cid)
        self.touch(doc_cid)
        dest = Path(dest)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                for data in self._iter_verified(manifest):
                    f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(dest.parent)

    def list(self, prefix: str = "") -> list[BlobInfo]:
        """Every known document whose cid starts with ``prefix``, sorted by cid."""
        with self._lock:
            rows = self._db.execute(
                "SELECT doc_cid, size, pinned, complete, last_used FROM blobs"
                " WHERE substr(doc_cid, 1, ?) = ? ORDER BY doc_cid",
                (len(prefix), prefix),
            ).fetchall()
        return [BlobInfo(r[0], r[1], bool(r[2]), bool(r[3]), r[4]) for r in rows]

    # ------------------------------------------------------------------ lifecycle

    def _set_pin(self, doc_cid: str, pinned: bool) -> None:
        parse_cid(doc_cid)
        with self._lock, self._tx():
            cur = self._db.execute("UPDATE blobs SET pinned = ? WHERE doc_cid = ?", (int(pinned), doc_cid))
            if cur.rowcount == 0:
                raise NotFound(f"no blob {doc_cid}")

    def pin(self, doc_cid: str) -> None:
        """Protect ``doc_cid`` from garbage collection."""
        self._set_pin(doc_cid, True)

    def unpin(self, doc_cid: str) -> None:
        self._set_pin(doc_cid, False)

    def delete(self, doc_cid: str) -> None:
        """Remove the manifest and every chunk no other manifest references."""
        parse_cid(doc_cid)
        with self._lock:
            if not self._delete_locked(doc_cid):
                raise NotFound(f"no blob {doc_cid}")

    def _delete_locked(self, doc_cid: str) -> bool:
        with self._tx():
            chunk_ids = [
                r[0]
                for r in self._db.execute(
                    "SELECT DISTINCT chunk_id FROM blob_chunks WHERE doc_cid = ?", (doc_cid,)
                )
            ]
            gone = self._db.execute("DELETE FROM blobs WHERE doc_cid = ?", (doc_cid,)).rowcount
            self._db.execute("DELETE FROM blob_chunks WHERE doc_cid = ?", (doc_cid,))
        with contextlib.suppress(FileNotFoundError):
            self._manifest_path(doc_cid).unlink()
        self._remove_unreferenced(chunk_ids)
        return gone > 0

    def _remove_unreferenced(self, chunk_ids: builtins.list[str]) -> None:
        """Delete those of ``chunk_ids`` that no manifest references and no put holds (lock held)."""
        doomed = [
            cid
            for cid in chunk_ids
            if self._inflight[cid] <= 0
            and self._db.execute("SELECT 1 FROM blob_chunks WHERE chunk_id = ? LIMIT 1", (cid,)).fetchone()
            is None
        ]
        with self._tx():
            self._db.executemany("DELETE FROM chunks WHERE chunk_id = ?", ((c,) for c in doomed))
        for cid in doomed:
            with contextlib.suppress(FileNotFoundError):
                self._chunk_path(cid).unlink()

    def usage_bytes(self) -> int:
        """Bytes held in chunk files (each distinct chunk counted once)."""
        with self._lock:
            row = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM chunks").fetchone()
        return int(row[0])

    def gc(self) -> builtins.list[str]:
        """Collect stale leftovers, then evict LRU unpinned complete blobs while over ``cap_bytes``.

        Stale leftovers are unpinned incomplete manifests and unreferenced chunks
        untouched for ``stale_after_s``.  Returns the evicted doc_cids.
        """
        with self._lock:
            return self._gc_locked(self.cap_bytes)

    def _gc_locked(self, target: int | None) -> builtins.list[str]:
        evicted: builtins.list[str] = []
        horizon = self._clock() - self.stale_after_s
        stale = [
            r[0]
            for r in self._db.execute(
                "SELECT doc_cid FROM blobs WHERE complete = 0 AND pinned = 0 AND changed_at < ?", (horizon,)
            ).fetchall()
        ]
        for doc_cid in stale:
            self._delete_locked(doc_cid)
            evicted.append(doc_cid)
        orphans = [
            r[0]
            for r in self._db.execute(
                "SELECT c.chunk_id FROM chunks c LEFT JOIN blob_chunks bc USING (chunk_id)"
                " WHERE bc.chunk_id IS NULL AND c.added_at < ?",
                (horizon,),
            ).fetchall()
        ]
        self._remove_unreferenced(orphans)
        if target is None:
            return evicted
        usage = self.usage_bytes()
        if usage <= target:
            return evicted
        candidates = self._db.execute(
            "SELECT doc_cid FROM blobs WHERE pinned = 0 AND complete = 1 ORDER BY last_used, doc_cid"
        ).fetchall()
        for (doc_cid,) in candidates:
            if usage <= target:
                break
            self._delete_locked(doc_cid)
            evicted.append(doc_cid)
            usage = self.usage_bytes()
        return evicted

    def check_quota(self, incoming_bytes: int) -> None:
        """Make room for ``incoming_bytes`` (evicting by LRU); :class:`CapacityExceeded` if impossible."""
        if incoming_bytes < 0:
            raise BadRequest("incoming_bytes must be >= 0")
        cap = self.cap_bytes
        if cap is None:
            return
        with self._lock:
            if self.usage_bytes() + incoming_bytes <= cap:
                return
            self._gc_locked(max(cap - incoming_bytes, 0))
            usage = self.usage_bytes()
        if usage + incoming_bytes > cap:
            raise CapacityExceeded(
                f"blob store holds {usage} bytes that cannot be evicted (pinned or in use);"
                f" {incoming_bytes} more would exceed the {cap} byte cap"
            )


def _syncfs_function() -> Callable[[int], int] | None:
    """``syncfs(2)`` from the C library (Linux), or ``None`` where it does not exist."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _syncfs_function()


def _sync_filesystem(path: Path) -> None:
    """Make every write to the filesystem holding ``path`` durable (one journal commit)."""
    assert _SYNCFS is not None
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs failed: {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class _Staged:
    chunk_id: str
    size: int
    dest: Path
    tmp: str | None
    """Temporary file holding the bytes (``None``: an intact copy was already stored)."""


class IncomingChunks:
    """Writes the chunks of one incoming blob, durable and visible in groups.

    :meth:`add` verifies a chunk against its id and writes it to a temporary
    file without fsync (several threads may add at once).  Every ``group``
    chunks, and on :meth:`commit`, the group is made durable together: one
    ``syncfs`` (or, where there is none, an fsync per file) makes the contents
    durable, then the files are renamed into place and recorded in one SQLite
    transaction; :meth:`commit` ends with another ``syncfs`` (or directory
    fsyncs) for the renames.  So a file under ``chunks/`` still always has
    durable, verified content, at a fraction of the per-file cost measured in
    ``specs/blobs.md``.  A chunk added but not yet committed is not stored: a
    crash loses it and it is sent again.

    Call :meth:`commit` when the stream ends, however it ends, then
    :meth:`close` (``with`` does the latter).
    """

    def __init__(self, store: BlobStore, group: int) -> None:
        if group < 1:
            raise ValueError("group must be at least 1")
        self._store = store
        self._group = group
        self._lock = threading.Lock()
        self._staged: list[_Staged] = []
        self._renamed_dirs: set[Path] = set()
        self.added = 0
        """Chunks accepted so far (verified; durable after the next commit)."""
        self.written = 0
        """Chunks that were not stored yet and were written."""

    def add(self, chunk_id: str, data: bytes) -> None:
        """Verify ``data`` against ``chunk_id`` and stage it; a mismatch is ``BadRequest``."""
        store = self._store
        _verify_chunk(chunk_id, data)
        dest = store._chunk_path(chunk_id)
        with store._lock:
            store._inflight[chunk_id] += 1
        try:
            try:
                present = dest.stat().st_size == len(data)
            except FileNotFoundError:
                present = False
            tmp: str | None = None
            if not present:
                with _disk_full_is_capacity(store.root, len(data)):
                    tmp = _write_temp(store._tmp_dir, (data,), fsync=_SYNCFS is None)
        except BaseException:
            store._release([chunk_id])
            raise
        with self._lock:
            self._staged.append(_Staged(chunk_id, len(data), dest, tmp))
            self.added += 1
            full = len(self._staged) >= self._group
        if full:
            self._commit_group()

    def _commit_group(self) -> None:
        with self._lock:
            staged, self._staged = self._staged, []
        if not staged:
            return
        store = self._store
        try:
            with _disk_full_is_capacity(store.root, sum(item.size for item in staged)):
                self._publish(staged)
        finally:
            self._discard(staged)

    def _publish(self, staged: list[_Staged]) -> None:
        """Durable contents, then renames, then one index transaction (caller discards leftovers)."""
        store = self._store
        if _SYNCFS is not None and any(item.tmp is not None for item in staged):
            _sync_filesystem(store._tmp_dir)
        renamed: set[Path] = set()
        with store._lock:  # renames are ordered against quarantine and delete
            for item in staged:
                if item.tmp is None:
                    continue
                parent = item.dest.parent
                if parent not in store._made_dirs:
                    parent.mkdir(parents=True, exist_ok=True)
                    store._made_dirs.add(parent)
                os.replace(item.tmp, item.dest)
                item.tmp = None
                renamed.add(parent)
                self.written += 1
        with self._lock:
            self._renamed_dirs |= renamed
        with store._lock, store._tx():
            now = store._clock()
            store._db.executemany(
                "INSERT INTO chunks VALUES (?, ?, ?)"
                " ON CONFLICT(chunk_id) DO UPDATE SET size = excluded.size",
                [(item.chunk_id, item.size, now) for item in staged],
            )

    def commit(self) -> None:
        """Make every staged chunk durable and visible (blocking)."""
        self._commit_group()
        with self._lock:
            dirs, self._renamed_dirs = self._renamed_dirs, set()
        if not dirs:
            return
        with _disk_full_is_capacity(self._store.root, 0):
            if _SYNCFS is not None:
                _sync_filesystem(self._store._tmp_dir)
            else:
                for d in dirs:
                    _fsync_dir(d)

    def close(self) -> None:
        """Drop whatever is staged and not committed (its temporary files are deleted)."""
        with self._lock:
            staged, self._staged = self._staged, []
        self._discard(staged)

    def _discard(self, staged: list[_Staged]) -> None:
        for item in staged:
            if item.tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(item.tmp)
        self._store._release([item.chunk_id for item in staged])

    def __enter__(self) -> IncomingChunks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
