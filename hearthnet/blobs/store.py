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
File-level helpers live in :mod:`~hearthnet.blobs.disk`, the writer of chunks
arriving from a peer in :mod:`~hearthnet.blobs.incoming`.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hearthnet.blobs.cid import CHUNK_SIZE, CidHasher, chunk_cid, cid_hex, is_cid, parse_cid
from hearthnet.blobs.destination import export_errors, write_destination
from hearthnet.blobs.disk import (
    DirSync,
    disk_full_is_capacity,
    fsync_dir,
    intact,
    manifest_of_stream,
    open_regular,
    read_bounded,
    read_exact,
    write_temp,
)
from hearthnet.blobs.incoming import INCOMING_GROUP, IncomingChunks
from hearthnet.blobs.manifest import (
    MAX_CHUNK_SIZE,
    MAX_MANIFEST_CHUNKS,
    Manifest,
    ManifestBuilder,
    chunk_count,
    manifest_for_bytes,
    verify_chunk,
)
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound
from hearthnet.runtime.sqlite_tx import transaction

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

_GC_BATCH: Final = 64
"""Blobs or chunks ``gc`` removes per hold of the lock."""

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
    private: bool = False
    """Only this node reads it: peers are told it is not here (``file.read``, ``file.list``)."""


_UPSERT_CHUNK: Final = (
    "INSERT INTO chunks VALUES (?, ?, ?)"
    " ON CONFLICT(chunk_id) DO UPDATE SET size = excluded.size, added_at = excluded.added_at"
)
"""Record a stored chunk; storing it again counts as a fresh use (it is not stale)."""


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

    # ------------------------------------------------------------------ paths and atomic files

    def _chunk_path(self, chunk_id: str) -> Path:
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

    # ------------------------------------------------------------------ writing

    def put_chunk(self, chunk_id: str, data: bytes) -> bool:
        """Store one chunk after checking ``chunk_cid(data) == chunk_id``.

        Returns ``False`` if an intact copy (hash checked) was already stored.
        A wrong id is :class:`BadRequest` and nothing is written.
        """
        verify_chunk(chunk_id, data)
        with self._lock:
            self._inflight[chunk_id] += 1
        try:
            if not self.has_chunk(chunk_id):
                self.room_for_arrivals(len(data))
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
        self, chunk_id: str, data: bytes | memoryview, pending_dirs: DirSync | None = None
    ) -> bool:
        """Write a chunk whose hash the caller has checked; caller marked it in flight."""
        path = self._chunk_path(chunk_id)
        present = intact(path, chunk_id)  # a damaged copy (even of the right size) is overwritten
        if not present:
            self._atomic_write(path, (data,), pending_dirs)
        try:
            self._record_chunks([(chunk_id, len(data))])
        except BaseException:
            if not present:  # a file with no index row would pass for stored (see missing_chunks)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
        return not present

    def _record_chunks(self, chunks: builtins.list[tuple[str, int]]) -> None:
        """Index stored chunks ``(id, size)``; storing one again counts as a fresh use (not stale)."""
        with self._lock, transaction(self._db):
            now = self._clock()
            self._db.executemany(_UPSERT_CHUNK, [(cid, size, now) for cid, size in chunks])
            for remaining in self._reserved.values():  # now counted as used, no longer as coming
                for cid, _ in chunks:
                    remaining.pop(cid, None)

    def incoming(self, group: int = INCOMING_GROUP) -> IncomingChunks:
        """A writer for the chunks of one blob arriving from a peer (see :class:`IncomingChunks`)."""
        return IncomingChunks(self, group)

    def put_bytes(self, data: bytes, *, pin: bool = False, private: bool = False) -> Manifest:
        """Store ``data`` as a complete blob; returns its manifest (``private``: see :meth:`_register`)."""
        manifest = manifest_for_bytes(data, self.chunk_size)  # too many chunks: BadRequest, nothing written
        self.check_quota(self.missing_bytes(manifest))
        view = memoryview(data)
        held: list[str] = []
        dirs = DirSync()
        try:
            for i, cid in enumerate(manifest.chunks):
                with self._lock:
                    self._inflight[cid] += 1
                held.append(cid)
                start = i * self.chunk_size
                self._store_verified_chunk(cid, view[start : start + self.chunk_size], dirs)
            dirs.flush()
            self._register(manifest, pin=pin, complete=True, private=private)
        finally:
            self._release(held)
        return manifest

    def put_file(self, path: Path, *, pin: bool = False, private: bool = False) -> Manifest:
        """Stream the regular file at ``path`` into the store (memory bounded by one chunk).

        The size is the opened file's; a file that is not regular (a FIFO, a device)
        is :class:`BadRequest`, found without blocking on it.
        """
        return self.import_file(path, pin=pin, private=private)[0]

    def import_file(self, path: Path, *, pin: bool = False, private: bool = False) -> tuple[Manifest, bool]:
        """:meth:`put_file`, also telling whether the blob is new: no row of its cid existed before.

        A caller that must take the import back if a later step fails (see
        :meth:`discard`) removes only a blob the import created.
        """
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if chunk_count(size, self.chunk_size) > MAX_MANIFEST_CHUNKS:
                raise BadRequest(
                    f"{path} is {size} bytes; one document can be at most"
                    f" {MAX_MANIFEST_CHUNKS * self.chunk_size} bytes ({MAX_MANIFEST_CHUNKS} chunks)"
                )
            if not self._fits(size):
                # Near the cap: count only what is not stored yet (a re-import adds nothing),
                # which takes one reading pass to learn the chunk ids.
                self.check_quota(self.missing_bytes(manifest_of_stream(f, self.chunk_size, size)))
                f.seek(0)
            builder = ManifestBuilder(self.chunk_size)
            held: list[str] = []
            dirs = DirSync()
            try:
                left = size  # what the quota was checked for: a file that grows is not read on
                while left > 0 and (chunk := read_exact(f, min(self.chunk_size, left))):
                    left -= len(chunk)
                    cid = builder.add(chunk)  # hashes the chunk and feeds the document hash
                    with self._lock:
                        self._inflight[cid] += 1
                    held.append(cid)
                    self._store_verified_chunk(cid, chunk, dirs)
                if left or f.read(1):
                    raise BadRequest(f"{path} changed size while it was being imported; import it again")
                dirs.flush()
                manifest = builder.build()
                known = self._register(manifest, pin=pin, complete=True, private=private)
            finally:
                self._release(held)
        return manifest, not known

    def put_manifest(self, manifest: Manifest, *, pin: bool = False, reserve: bool = False) -> None:
        """Record a (validated, not yet verified) manifest from a peer; its chunks may be missing.

        Refuses (:class:`CapacityExceeded`) a blob whose missing chunks could not
        fit under the cap however much is evicted, but evicts nothing: the
        manifest only claims its size, so room is made as verified chunks
        arrive (:class:`~hearthnet.blobs.incoming.IncomingChunks`), and a
        made-up manifest cannot empty the cache.  With ``reserve`` (a transfer
        about to bring the chunks) they stay counted against the cap until
        :meth:`release_reservation`.  It replaces a stored
        manifest of the same document that is incomplete or unreadable (a
        transfer that died, perhaps a peer's made-up one), never a complete
        one; :meth:`complete` with ``manifest=`` then checks the manifest the
        transfer actually used.
        """
        if not isinstance(manifest, Manifest):
            raise BadRequest("put_manifest needs a Manifest")
        self._keep_fresh(manifest)  # a resumed transfer: what it already has is not stale garbage
        self._admit_transfer(manifest, reserve=reserve)
        try:
            self._register(manifest, pin=pin, complete=False)
        except BaseException:
            if reserve:
                self.release_reservation(manifest.doc_cid)
            raise

    def release_reservation(self, doc_cid: str) -> None:
        """The transfer of ``doc_cid`` ended (however): what it did not bring no longer counts."""
        with self._lock:
            self._reserved.pop(doc_cid, None)

    def _reserved_chunks(self, besides: str | None = None) -> dict[str, int]:
        """Chunks that transfers in progress will still bring, each once (lock held).

        ``besides``: a transfer left out (a resumed one replaces its own reservation).
        """
        out: dict[str, int] = {}
        for doc_cid, remaining in self._reserved.items():
            if doc_cid != besides:
                out.update(remaining)
        return out

    def _reserved_bytes(self) -> int:
        """Bytes all transfers in progress will still bring (lock held)."""
        return sum(self._reserved_chunks().values())

    def _admit_transfer(self, manifest: Manifest, *, reserve: bool) -> None:
        """Refuse a transfer whose missing chunks cannot fit; with ``reserve``, count them as coming."""
        with self._lock:
            missing = {cid: manifest.length_of(cid) for cid in self.missing_chunks(manifest)}
            if self.cap_bytes is not None:
                others = self._reserved_chunks(besides=manifest.doc_cid)
                incoming = sum(size for cid, size in missing.items() if cid not in others)
                # its chunks already here stop being evictable once its manifest is recorded
                present = self._evictable_among(c for c in manifest.chunks if c not in missing)
                self._make_room(incoming, sum(others.values()), evict=False, becomes_kept=present)
            if reserve:
                self._reserved[manifest.doc_cid] = missing

    def room_for_arrivals(self, incoming_bytes: int) -> None:
        """Evict (LRU) so that ``incoming_bytes`` of verified chunks about to be stored fit under the cap.

        Called by :class:`~hearthnet.blobs.incoming.IncomingChunks` before it
        publishes a group: the cache gives way only to data that arrived, so a
        peer must send N bytes of real chunks to push N bytes out.
        :class:`CapacityExceeded` if they cannot fit (pinned or incomplete blobs
        grew meanwhile).
        """
        if self.cap_bytes is None or incoming_bytes <= 0:
            return
        with self._lock:
            self._make_room(incoming_bytes, 0)

    def _keep_fresh(self, manifest: Manifest) -> None:
        """Restart the staleness clock of ``manifest``'s blob row and of its chunks held here."""
        now = self._clock()
        with self._lock, transaction(self._db):
            self._db.execute("UPDATE blobs SET changed_at = ? WHERE doc_cid = ?", (now, manifest.doc_cid))
            ids = sorted(set(manifest.chunks))
            for a in range(0, len(ids), 500):
                part = ids[a : a + 500]
                self._db.execute(
                    f"UPDATE chunks SET added_at = ? WHERE chunk_id IN ({', '.join('?' * len(part))})",
                    (now, *part),
                )

    def _register(self, manifest: Manifest, *, pin: bool, complete: bool, private: bool = False) -> bool:
        """Write the manifest file and its index rows; whether a row of the blob existed before.

        ``private`` marks a new blob as this node's alone; registering a blob that
        is not private (a public import, a peer's put) makes it public for good:
        its bytes are shared then, and ``private`` never hides what was shared.

        ``complete=True`` (the caller verified the reassembly): the manifest
        replaces whatever is stored and the blob is complete, unless one of its
        chunks left the index meanwhile (quarantined): then :class:`BadRequest`.
        ``complete=False`` (a peer's manifest): a complete, readable stored
        manifest is kept; anything else is replaced.  Replacing a manifest
        restarts its ``complete`` flag; ``pinned`` only ever turns on here.
        """
        doc_cid = manifest.doc_cid
        with self._lock:
            row = self._db.execute("SELECT complete FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
            existing = None
            if row is not None:
                with contextlib.suppress(CorruptBlob):  # a damaged file is simply rewritten
                    existing = self._read_manifest_file(doc_cid)
            same = existing == manifest
            if not complete and row is not None and row[0] and existing is not None and not same:
                return True  # a verified manifest is not displaced by an unverified one
            if complete:
                lost = self._unindexed(manifest.chunks)
                if lost:
                    raise BadRequest(
                        f"blob {doc_cid} lost {lost} chunks while it was being completed; send them again"
                    )
            if not same:
                self._atomic_write(self._manifest_path(doc_cid), (manifest.to_bytes(),))
            with self._durable(), transaction(self._db):
                tick = self._tick()
                now = self._clock()
                if not same:
                    # the chunks of a replaced manifest (perhaps the real one, damaged) stay
                    # for a day as unreferenced chunks: an honest transfer can still reuse them
                    self._db.execute(
                        "UPDATE chunks SET added_at = ? WHERE chunk_id IN"
                        " (SELECT chunk_id FROM blob_chunks WHERE doc_cid = ?)",
                        (now, doc_cid),
                    )
                    self._db.execute("DELETE FROM blob_chunks WHERE doc_cid = ?", (doc_cid,))
                    self._db.executemany(
                        "INSERT INTO blob_chunks VALUES (?, ?, ?)",
                        ((doc_cid, i, c) for i, c in enumerate(manifest.chunks)),
                    )
                self._db.execute(
                    "INSERT INTO blobs (doc_cid, size, pinned, complete, last_used, changed_at, private)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(doc_cid) DO UPDATE SET"
                    " size = excluded.size, pinned = max(pinned, excluded.pinned),"
                    " complete = CASE WHEN ? THEN excluded.complete"
                    " ELSE max(complete, excluded.complete) END,"
                    " last_used = excluded.last_used, changed_at = excluded.changed_at,"
                    " private = min(private, excluded.private)",
                    (doc_cid, manifest.size, int(pin), int(complete), tick, now, int(private), int(not same)),
                )
        return row is not None

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

    def missing_chunks(self, manifest: Manifest) -> list[str]:
        """Ids of ``manifest``'s chunks not stored yet, in manifest order, without repeats.

        Stored means both on disk and in the index: a file an interrupted write left
        without its row is asked for again (``complete`` would not count it).
        """
        wanted = list(dict.fromkeys(manifest.chunks))
        indexed = self._indexed(wanted)
        return [cid for cid in wanted if cid not in indexed or not self.has_chunk(cid)]

    def _indexed(self, chunk_ids: Sequence[str]) -> set[str]:
        """Which of ``chunk_ids`` have a row in the chunk index."""
        with self._lock:
            return {
                row[0]
                for row in self._rows_over(
                    "SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks})", chunk_ids
                )
            }

    def missing_bytes(self, manifest: Manifest) -> int:
        """Bytes the chunks :meth:`missing_chunks` lists will take (what a transfer adds)."""
        return sum(manifest.length_of(cid) for cid in self.missing_chunks(manifest))

    def complete(
        self, doc_cid: str, *, manifest: Manifest | None = None, reassembly: ReassemblyCheck | None = None
    ) -> Manifest:
        """Check that all chunks are present and reassemble to ``doc_cid``; mark the blob complete.

        ``manifest``: the one the transfer used (default: the stored one).  If
        it checks out it becomes the stored manifest, whatever another transfer
        stored meanwhile.  Missing chunks -> :class:`BadRequest` (the manifest
        stays, fetch the rest).  A reassembly that does not hash to ``doc_cid``
        -> :class:`BadRequest`, and the manifest is dropped if it is still the
        stored, incomplete one.  A corrupt chunk -> :class:`CorruptBlob`.

        ``reassembly``: the writer saw every chunk of this manifest, in order,
        and hashed them as they passed; if it matched, the chunks are not read
        back (they were each verified against their ids when stored).
        """
        if manifest is None:
            manifest = self.get_manifest(doc_cid)
        elif manifest.doc_cid != doc_cid:
            raise BadRequest(f"the manifest given is for {manifest.doc_cid}, not {doc_cid}")
        missing = self.missing_chunks(manifest)
        if missing:
            raise BadRequest(f"blob {doc_cid} is missing {len(missing)} of {len(manifest.chunks)} chunks")
        if reassembly is None or not reassembly.matches(manifest):
            self._check_reassembly(manifest)
        self._register(manifest, pin=False, complete=True)
        return manifest

    def _check_reassembly(self, manifest: Manifest) -> None:
        """Read the stored chunks back in order and compare their hash with ``doc_cid``."""
        doc_cid = manifest.doc_cid
        hasher = CidHasher()
        for i, cid in enumerate(manifest.chunks):
            data = self._read_chunk(cid)
            if len(data) != manifest.chunk_length(i):
                dropped = "; manifest dropped" if self._drop_if_unchanged(manifest) else ""
                raise BadRequest(f"manifest for {doc_cid} has a chunk of the wrong length{dropped}")
            hasher.update(data)
        if hasher.cid() != doc_cid:
            dropped = "; manifest dropped" if self._drop_if_unchanged(manifest) else ""
            raise BadRequest(f"chunks do not reassemble to {doc_cid}{dropped}")

    def _drop_if_unchanged(self, manifest: Manifest) -> bool:
        """Delete the blob if ``manifest`` is still its stored, incomplete manifest.

        Checked under the lock: a concurrent local put of the real document (or
        another transfer's manifest) is left alone.
        """
        doc_cid = manifest.doc_cid
        with self._lock:
            row = self._db.execute(
                "SELECT complete, pinned FROM blobs WHERE doc_cid = ?", (doc_cid,)
            ).fetchone()
            if row is None or row[0] or row[1]:
                return False  # a pinned blob keeps its row (and pin) for the next, honest transfer
            try:
                stored = self._read_manifest_file(doc_cid)
            except CorruptBlob:
                return False
            return stored == manifest and self._delete_locked(doc_cid)

    # ------------------------------------------------------------------ reading

    def has_blob(self, doc_cid: str) -> bool:
        """Whether a complete manifest for ``doc_cid`` is stored."""
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT complete FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
        return row is not None and bool(row[0])

    def has_chunk(self, chunk_id: str) -> bool:
        return self._chunk_path(chunk_id).is_file()

    def check_held(self, doc_cid: str) -> bool:
        """Whether ``doc_cid`` is complete and still whole on disk (its manifest readable, no chunk gone).

        Cheaper than reading it back (no hashing).  A complete blob that fails
        this is marked incomplete, so a transfer can repair it.
        """
        if not self.has_blob(doc_cid):
            return False
        try:
            manifest = self.get_manifest(doc_cid)  # a damaged manifest file marks the blob incomplete
        except NotFound:
            return False
        missing = self.missing_chunks(manifest)
        for cid in missing:
            self._forget_vanished(cid)
        return not missing

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
        """The stored manifest (complete or not); :class:`NotFound` if unknown.

        A manifest file that is damaged (:class:`CorruptBlob`) or gone marks the
        blob incomplete: a transfer of the document replaces the manifest.
        """
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT 1 FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
            if row is None:
                raise NotFound(f"no manifest for {doc_cid}")
            try:
                manifest = self._read_manifest_file(doc_cid)
            except CorruptBlob:
                self._mark_incomplete(doc_cid)
                raise
            if manifest is None:
                self._mark_incomplete(doc_cid)
                raise NotFound(f"the manifest file of {doc_cid} is gone")
        return manifest

    def _read_chunk(self, chunk_id: str) -> bytes:
        """Read and verify one chunk; quarantine and raise :class:`CorruptBlob` on mismatch."""
        path = self._chunk_path(chunk_id)
        try:
            data = read_bounded(path)
        except FileNotFoundError:
            self._forget_vanished(chunk_id)
            raise NotFound(f"chunk {chunk_id} is not stored") from None
        if data is not None and chunk_cid(data) == chunk_id:
            return data
        return self._quarantine(chunk_id, path)

    def _forget_vanished(self, chunk_id: str) -> None:
        """A chunk file is gone: drop it from the index and mark every complete blob using it incomplete."""
        with self._lock:
            if self._chunk_path(chunk_id).is_file():
                return  # stored again meanwhile
            with transaction(self._db):
                self._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (chunk_id,))
                self._db.execute(
                    "UPDATE blobs SET complete = 0, changed_at = ? WHERE complete = 1 AND doc_cid IN"
                    " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)",
                    (self._clock(), chunk_id),
                )

    def _quarantine(self, chunk_id: str, path: Path) -> bytes:
        """Move a chunk that failed its hash out of ``chunks/`` and raise :class:`CorruptBlob`.

        Re-checked under the lock first: a concurrent refetch may have replaced it.
        """
        with self._lock:
            try:
                data = read_bounded(path)
                if data is not None and chunk_cid(data) == chunk_id:
                    return data
            except FileNotFoundError:
                pass
            dest = self._quarantine_dir / f"{cid_hex(chunk_id)}.{time.time_ns()}"
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, dest)
            with transaction(self._db):
                self._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (chunk_id,))
                self._db.execute(
                    "UPDATE blobs SET complete = 0, changed_at = ? WHERE doc_cid IN"
                    " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)",
                    (self._clock(), chunk_id),
                )
        raise CorruptBlob(f"chunk {chunk_id} is corrupt and was quarantined; refetch it")

    def _touch_blobs_of_chunk(self, chunk_id: str) -> None:
        with self._lock, transaction(self._db):
            tick = self._tick()
            self._db.execute(
                "UPDATE blobs SET last_used = ? WHERE doc_cid IN"
                " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)",
                (tick, chunk_id),
            )

    def touch(self, doc_cid: str) -> None:
        """Mark ``doc_cid`` as most recently used."""
        with self._lock, transaction(self._db):
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
        with self._lock, transaction(self._db):
            self._db.execute(
                "UPDATE blobs SET complete = 0, changed_at = ? WHERE doc_cid = ? AND complete = 1",
                (self._clock(), doc_cid),
            )

    def read_blob(self, doc_cid: str, *, max_bytes: int = 256 * 1024 * 1024) -> bytes:
        """The whole verified blob in memory; :class:`BadRequest` if larger than ``max_bytes``."""
        manifest = self._complete_manifest(doc_cid)
        if manifest.size > max_bytes:
            raise BadRequest(f"blob {doc_cid} is {manifest.size} bytes, over the {max_bytes} byte limit")
        self.touch(doc_cid)
        return b"".join(self._iter_verified(manifest))

    def export(self, doc_cid: str, dest: Path, *, force: bool = False) -> Manifest:
        """Write the verified blob to ``dest``, whole or not at all; returns its manifest.

        Never through a symbolic link at ``dest``, never into or over anything but a
        regular file, and over a regular file only with ``force`` (its permission
        bits are kept; a new file gets 0666 less the umask): see
        :mod:`~hearthnet.blobs.destination`.  Those refusals, and a destination
        that cannot be written (no such directory, no permission), are
        :class:`BadRequest`; a full disk :class:`CapacityExceeded`.
        """
        manifest = self._complete_manifest(doc_cid)
        self.touch(doc_cid)
        dest = Path(dest)
        with export_errors(dest, manifest.size):
            write_destination(dest, self._iter_verified(manifest), force=force)
        return manifest

    def list(
        self, prefix: str = "", *, after: str = "", limit: int | None = None, include_private: bool = True
    ) -> list[BlobInfo]:
        """Known documents whose cid starts with ``prefix``, sorted by cid.

        ``after``: only cids sorting after it (the last one of the previous page);
        ``limit``: at most that many; ``include_private=False`` leaves private blobs out.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT doc_cid, size, pinned, complete, last_used, private FROM blobs"
                " WHERE substr(doc_cid, 1, ?) = ? AND doc_cid > ? AND (? OR private = 0)"
                " ORDER BY doc_cid LIMIT ?",
                (len(prefix), prefix, after, int(include_private), -1 if limit is None else limit),
            ).fetchall()
        return [BlobInfo(r[0], r[1], bool(r[2]), bool(r[3]), r[4], bool(r[5])) for r in rows]

    def is_private(self, doc_cid: str) -> bool:
        """Whether ``doc_cid`` is a blob only this node may read (False if unknown)."""
        with self._lock:
            row = self._db.execute("SELECT private FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
        return bool(row and row[0])

    def chunk_is_private(self, chunk_id: str) -> bool:
        """Whether every blob that holds ``chunk_id`` is private (a chunk no blob holds is not)."""
        with self._lock:
            holders, public = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(b.private = 0), 0)"
                " FROM blob_chunks bc JOIN blobs b USING (doc_cid) WHERE bc.chunk_id = ?",
                (chunk_id,),
            ).fetchone()
        return bool(holders) and not public

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

    def _set_pin(self, doc_cid: str, pinned: bool) -> None:
        parse_cid(doc_cid)
        with self._durable(), transaction(self._db):
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

    def discard(self, doc_cid: str) -> bool:
        """Delete ``doc_cid`` unless it is pinned (as the collector may); whether it was deleted.

        Takes back an import whose next step failed: a blob pinned meanwhile (someone
        stored the same bytes to keep) stays, and an unpinned one is only a cache entry.
        """
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT pinned FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
            if row is None or row[0]:
                return False
            return self._delete_locked(doc_cid)

    def _delete_locked(self, doc_cid: str) -> bool:
        return self._drop(doc_cid)[0]

    def _drop(self, doc_cid: str) -> tuple[bool, int]:
        """Delete a manifest and its chunks no other manifest uses (lock held): (found, bytes freed)."""
        with transaction(self._db):
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
        return gone > 0, self._remove_unreferenced(chunk_ids)[1]

    def _remove_unreferenced(self, chunk_ids: builtins.list[str]) -> tuple[int, int]:
        """Delete those of ``chunk_ids`` that no manifest references and no put holds (lock held).

        Returns how many were deleted and the bytes they held.
        """
        doomed = [
            cid
            for cid in chunk_ids
            if self._inflight[cid] <= 0
            and self._db.execute("SELECT 1 FROM blob_chunks WHERE chunk_id = ? LIMIT 1", (cid,)).fetchone()
            is None
        ]
        with transaction(self._db):
            freed = self._sum_over(
                "SELECT COALESCE(SUM(size), 0) FROM chunks WHERE chunk_id IN ({marks})", doomed
            )
            self._db.executemany("DELETE FROM chunks WHERE chunk_id = ?", ((c,) for c in doomed))
        for cid in doomed:
            with contextlib.suppress(FileNotFoundError):
                self._chunk_path(cid).unlink()
        return len(doomed), freed

    def usage_bytes(self) -> int:
        """Bytes held in chunk files (each distinct chunk counted once)."""
        with self._lock:
            row = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM chunks").fetchone()
        return int(row[0])

    def gc(self) -> builtins.list[str]:
        """Collect stale leftovers, then evict LRU unpinned complete blobs while over ``cap_bytes``.

        Stale leftovers are unpinned incomplete manifests and unreferenced chunks
        untouched for ``stale_after_s``.  The lock is taken for a small batch of
        removals at a time, so puts and reads go on during a long collection.
        Returns the removed doc_cids.
        """
        removed = self._collect_stale()
        if self.cap_bytes is not None:
            removed += self._evict_down_to(self.cap_bytes)
        return removed

    def _collect_stale(self) -> builtins.list[str]:
        horizon = self._clock() - self.stale_after_s
        removed: builtins.list[str] = []
        while True:
            with self._lock:
                batch = [
                    r[0]
                    for r in self._db.execute(
                        "SELECT doc_cid FROM blobs WHERE complete = 0 AND pinned = 0 AND changed_at < ?"
                        " ORDER BY changed_at LIMIT ?",
                        (horizon, _GC_BATCH),
                    ).fetchall()
                ]
                for doc_cid in batch:
                    self._delete_locked(doc_cid)
                removed.extend(batch)
            if len(batch) < _GC_BATCH:
                break
        offset = 0  # orphans still held by a put in progress are skipped, not re-selected forever
        while True:
            with self._lock:
                orphans = [
                    r[0]
                    for r in self._db.execute(
                        "SELECT c.chunk_id FROM chunks c LEFT JOIN blob_chunks bc USING (chunk_id)"
                        " WHERE bc.chunk_id IS NULL AND c.added_at < ? ORDER BY c.chunk_id LIMIT ? OFFSET ?",
                        (horizon, _GC_BATCH, offset),
                    ).fetchall()
                ]
                offset += len(orphans) - self._remove_unreferenced(orphans)[0]
            if len(orphans) < _GC_BATCH:
                break
        return removed

    def _evict_down_to(self, target: int) -> builtins.list[str]:
        """Delete unpinned complete blobs, least recently used first, until usage <= ``target``."""
        evicted: builtins.list[str] = []
        with self._lock:
            usage = self.usage_bytes()  # once: each eviction subtracts what it freed
        while usage > target:
            with self._lock:
                row = self._db.execute(
                    "SELECT doc_cid FROM blobs WHERE pinned = 0 AND complete = 1"
                    " ORDER BY last_used, doc_cid LIMIT 1"
                ).fetchone()
                if row is None:
                    break
                usage -= self._drop(row[0])[1]
                evicted.append(row[0])
        return evicted

    _SOLE = (
        "FROM chunks c WHERE EXISTS (SELECT 1 FROM blob_chunks bc WHERE bc.chunk_id = c.chunk_id)"
        " AND NOT EXISTS (SELECT 1 FROM blob_chunks bc JOIN blobs b ON b.doc_cid = bc.doc_cid"
        " WHERE bc.chunk_id = c.chunk_id AND (b.pinned = 1 OR b.complete = 0))"
    )
    """Chunks that evicting every unpinned complete blob would free."""

    def _evictable_bytes(self) -> int:
        """Bytes that evicting every unpinned complete blob would free (lock held).

        A chunk is freed only if every manifest referencing it is unpinned and
        complete and no put in progress holds it.
        """
        total = int(self._db.execute(f"SELECT COALESCE(SUM(c.size), 0) {self._SOLE}").fetchone()[0])
        return total - self._evictable_among(self._inflight)

    def _evictable_among(self, chunk_ids: Iterable[str]) -> int:
        """Bytes of those of ``chunk_ids`` that :meth:`_evictable_bytes` counts (lock held)."""
        query = f"SELECT COALESCE(SUM(c.size), 0) {self._SOLE} AND c.chunk_id IN ({{marks}})"
        return self._sum_over(query, sorted(set(chunk_ids)))

    def _fits(self, incoming_bytes: int) -> bool:
        """Whether ``incoming_bytes`` more fit under the cap (beside transfers in progress) as it is."""
        if self.cap_bytes is None:
            return True
        with self._lock:
            return self.usage_bytes() + self._reserved_bytes() + incoming_bytes <= self.cap_bytes

    def check_quota(self, incoming_bytes: int) -> None:
        """Make room for ``incoming_bytes`` (evicting by LRU); :class:`CapacityExceeded` if impossible.

        What transfers in progress will still bring counts as used.  Nothing is
        evicted unless the eviction makes enough room: more than the cap, or
        more than what pinned, incomplete, in-use and reserved chunks leave, is
        refused at once.
        """
        if incoming_bytes < 0:
            raise BadRequest("incoming_bytes must be >= 0")
        if self.cap_bytes is None:
            return
        with self._lock:
            self._make_room(incoming_bytes, self._reserved_bytes())

    def _make_room(
        self, incoming_bytes: int, reserved: int, *, evict: bool = True, becomes_kept: int = 0
    ) -> None:
        """:meth:`check_quota`'s work with ``reserved`` bytes still coming (lock held, a cap set).

        ``evict=False``: only refuse what could never fit (stale leftovers are
        still collected); the eviction is left to the arrival of the data.
        ``becomes_kept``: evictable bytes about to become unevictable (a
        transfer's chunks already here, once its manifest is recorded).
        """
        cap = self.cap_bytes
        assert cap is not None
        if incoming_bytes > cap:
            raise CapacityExceeded(f"{incoming_bytes} bytes are more than the blob store's {cap} byte cap")
        if self.usage_bytes() + reserved + incoming_bytes <= cap:
            return
        self._collect_stale()
        usage = self.usage_bytes()
        if usage + reserved + incoming_bytes <= cap:
            return
        kept = usage - self._evictable_bytes() + becomes_kept
        if kept + reserved + incoming_bytes > cap:
            busy = f"; transfers in progress will bring {reserved} more" if reserved else ""
            raise CapacityExceeded(
                f"the blob store's cap is {cap} bytes and {kept} of the {usage} it holds are"
                f" pinned, incomplete or in use{busy}; {incoming_bytes} more do not fit"
                " (nothing was evicted)"
            )
        if evict:
            self._evict_down_to(cap - reserved - incoming_bytes)
