"""Reading blobs: every chunk hashed on every read, a damaged one quarantined (the blob can be
fetched again), manifests, whole blobs within a bound, exports, the listing."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from hearthnet.blobs.cid import CidHasher, chunk_cid, cid_hex, parse_cid
from hearthnet.blobs.core import BlobInfo, CorruptBlob, StoreCore
from hearthnet.blobs.destination import export_errors, write_destination
from hearthnet.blobs.disk import read_bounded
from hearthnet.blobs.manifest import Manifest
from hearthnet.errors import BadRequest, NotFound
from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["BlobReads"]

_BLOBS_USING = (
    "UPDATE blobs SET complete = 0, changed_at = ? WHERE doc_cid IN"
    " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)"
)
"""Every blob using a chunk (a corrupt chunk: those already incomplete restart their clock too)."""
_COMPLETE_BLOBS_USING = (
    "UPDATE blobs SET complete = 0, changed_at = ? WHERE complete = 1 AND doc_cid IN"
    " (SELECT doc_cid FROM blob_chunks WHERE chunk_id = ?)"
)
"""The complete blobs using a chunk (a vanished chunk file)."""


class BlobReads(StoreCore):
    """The reading part of :class:`~hearthnet.blobs.store.BlobStore`."""

    if TYPE_CHECKING:  # provided by the other parts of BlobStore

        def missing_chunks(self, manifest: Manifest) -> list[str]: ...

    def has_blob(self, doc_cid: str) -> bool:
        """Whether a complete manifest for ``doc_cid`` is stored."""
        parse_cid(doc_cid)
        with self._lock:
            row = self._db.execute("SELECT complete FROM blobs WHERE doc_cid = ?", (doc_cid,)).fetchone()
        return row is not None and bool(row[0])

    def has_chunk(self, chunk_id: str) -> bool:
        return self.chunk_path(chunk_id).is_file()

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
        path = self.chunk_path(chunk_id)
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
            if self.chunk_path(chunk_id).is_file():
                return  # stored again meanwhile
            self._unindex_chunk(chunk_id, _COMPLETE_BLOBS_USING)

    def _unindex_chunk(self, chunk_id: str, mark_incomplete: str) -> None:
        """Drop ``chunk_id`` from the index and mark incomplete (their stale clock restarted) the
        blobs ``mark_incomplete`` updates (the lock held)."""
        with transaction(self._db):
            self._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (chunk_id,))
            self._db.execute(mark_incomplete, (self._clock(), chunk_id))

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
            self._unindex_chunk(chunk_id, _BLOBS_USING)
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
