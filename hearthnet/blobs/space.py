"""The store's space: pins, deletes, garbage collection of stale leftovers, LRU eviction under the
cap, and room made (or refused) for what transfers bring."""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from hearthnet.blobs.cid import parse_cid
from hearthnet.blobs.core import StoreCore
from hearthnet.blobs.manifest import Manifest
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound
from hearthnet.runtime.sqlite_tx import transaction

__all__ = ["BlobSpace"]

_GC_BATCH: Final = 64
"""Blobs or chunks ``gc`` removes per hold of the lock."""


class BlobSpace(StoreCore):
    """The space part of :class:`~hearthnet.blobs.store.BlobStore`: what stays, what goes."""

    if TYPE_CHECKING:  # provided by the other parts of BlobStore

        def missing_chunks(self, manifest: Manifest) -> list[str]: ...

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

    def _column(self, sql: str, *args: object) -> builtins.list[str]:
        """The first column of ``sql``'s rows (the lock held)."""
        return [row[0] for row in self._db.execute(sql, args).fetchall()]

    def _delete_locked(self, doc_cid: str) -> bool:
        return self._drop(doc_cid)[0]

    def _drop(self, doc_cid: str) -> tuple[bool, int]:
        """Delete a manifest and its chunks no other manifest uses (lock held): (found, bytes freed)."""
        with transaction(self._db):
            chunk_ids = self._column("SELECT DISTINCT chunk_id FROM blob_chunks WHERE doc_cid = ?", doc_cid)
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
                self.chunk_path(cid).unlink()
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
                batch = self._column(
                    "SELECT doc_cid FROM blobs WHERE complete = 0 AND pinned = 0 AND changed_at < ?"
                    " ORDER BY changed_at LIMIT ?",
                    horizon,
                    _GC_BATCH,
                )
                for doc_cid in batch:
                    self._delete_locked(doc_cid)
                removed.extend(batch)
            if len(batch) < _GC_BATCH:
                break
        offset = 0  # orphans still held by a put in progress are skipped, not re-selected forever
        while True:
            with self._lock:
                orphans = self._column(
                    "SELECT c.chunk_id FROM chunks c LEFT JOIN blob_chunks bc USING (chunk_id)"
                    " WHERE bc.chunk_id IS NULL AND c.added_at < ? ORDER BY c.chunk_id LIMIT ? OFFSET ?",
                    horizon,
                    _GC_BATCH,
                    offset,
                )
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
