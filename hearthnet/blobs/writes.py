"""Writing blobs: chunks (checked against their ids, one by one or a group arriving from a peer),
files imported, manifests registered, a blob completed once every chunk is here."""

from __future__ import annotations

import builtins
import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from hearthnet.blobs.cid import CidHasher
from hearthnet.blobs.core import CorruptBlob, StoreCore
from hearthnet.blobs.disk import DirSync, intact, manifest_of_stream, open_regular, read_exact
from hearthnet.blobs.incoming import INCOMING_GROUP, IncomingChunks, StagedChunk
from hearthnet.blobs.manifest import (
    MAX_MANIFEST_CHUNKS,
    Manifest,
    ManifestBuilder,
    ReassemblyCheck,
    chunk_count,
    manifest_for_bytes,
    verify_chunk,
)
from hearthnet.errors import BadRequest
from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["BlobWrites"]

_UPSERT_CHUNK: Final = (
    "INSERT INTO chunks VALUES (?, ?, ?)"
    " ON CONFLICT(chunk_id) DO UPDATE SET size = excluded.size, added_at = excluded.added_at"
)
"""Record a stored chunk; storing it again counts as a fresh use (it is not stale)."""


class BlobWrites(StoreCore):
    """The writing part of :class:`~hearthnet.blobs.store.BlobStore`."""

    if TYPE_CHECKING:  # provided by the other parts of BlobStore

        def has_chunk(self, chunk_id: str) -> bool: ...

        def room_for_arrivals(self, incoming_bytes: int) -> None: ...

        def check_quota(self, incoming_bytes: int) -> None: ...

        def _fits(self, incoming_bytes: int) -> bool: ...

        def _admit_transfer(self, manifest: Manifest, *, reserve: bool) -> None: ...

        def _read_manifest_file(self, doc_cid: str) -> Manifest | None: ...

        def get_manifest(self, doc_cid: str) -> Manifest: ...

        def _read_chunk(self, chunk_id: str) -> bytes: ...

        def _delete_locked(self, doc_cid: str) -> bool: ...

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
            self.release([chunk_id])

    def _store_verified_chunk(
        self, chunk_id: str, data: bytes | memoryview, pending_dirs: DirSync | None = None
    ) -> bool:
        """Write a chunk whose hash the caller has checked; caller marked it in flight."""
        path = self.chunk_path(chunk_id)
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

    def publish_chunks(self, staged: Sequence[StagedChunk]) -> set[Path]:
        """Rename a group of verified chunks (contents durable already) into place and index them
        in one transaction; the directories renamed into are returned (the caller syncs them).

        The cache gives way first, to verified data only and as much as arrived
        (:meth:`room_for_arrivals`).  If a rename, a directory or the index write fails, what
        this group added is taken back: files without index rows would look present to a
        resumed transfer (which then never sends them) yet lost to :meth:`complete`.
        """
        renamed: set[Path] = set()
        fresh: list[Path] = []
        with self._lock:  # renames are ordered against quarantine and delete
            self.room_for_arrivals(sum(item.size for item in staged if item.tmp is not None))
            try:
                for item in staged:
                    if item.tmp is None:
                        continue
                    parent = item.dest.parent
                    if parent not in self._made_dirs:
                        parent.mkdir(parents=True, exist_ok=True)  # ENOSPC here too: undone below
                        self._made_dirs.add(parent)
                    if not item.dest.exists():
                        fresh.append(item.dest)
                    os.replace(item.tmp, item.dest)
                    item.tmp = None
                    item.renamed = True
                    renamed.add(parent)
                self._record_chunks([(item.chunk_id, item.size) for item in staged])
            except BaseException:
                for path in fresh:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                raise
        return renamed

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
            self.release(held)
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
                self.release(held)
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

    def missing_chunks(self, manifest: Manifest) -> list[str]:
        """Ids of ``manifest``'s chunks not stored yet, in manifest order, without repeats.

        Stored means both on disk and in the index: a file an interrupted write left
        without its row is asked for again (``complete`` would not count it).
        """
        wanted = list(dict.fromkeys(manifest.chunks))
        indexed = self._indexed(wanted)
        return [cid for cid in wanted if cid not in indexed or not self.has_chunk(cid)]

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
