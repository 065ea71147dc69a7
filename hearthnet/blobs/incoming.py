"""Chunks of one blob arriving from a peer: verified, written in parallel, durable in groups."""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from hearthnet.blobs.disk import SYNCFS, disk_full_is_capacity, fsync_dir, intact, sync_filesystem, write_temp
from hearthnet.blobs.manifest import verify_chunk

if TYPE_CHECKING:
    from hearthnet.blobs.store import BlobStore

__all__ = ["INCOMING_GROUP", "IncomingChunks"]

INCOMING_GROUP: Final = 16
"""Chunks an :class:`IncomingChunks` writes before making them durable together (4 MiB)."""


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
        verify_chunk(chunk_id, data)
        dest = store._chunk_path(chunk_id)
        with store._lock:
            store._inflight[chunk_id] += 1
        try:
            present = intact(dest, chunk_id)  # a damaged copy (even of the right size) is replaced
            tmp: str | None = None
            if not present:
                with disk_full_is_capacity(store.root, len(data)):
                    tmp = write_temp(store._tmp_dir, (data,), fsync=SYNCFS is None)
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
            with disk_full_is_capacity(store.root, sum(item.size for item in staged)):
                self._publish(staged)
        finally:
            self._discard(staged)

    def _publish(self, staged: list[_Staged]) -> None:
        """Durable contents, then renames, then one index transaction (caller discards leftovers)."""
        store = self._store
        if SYNCFS is not None and any(item.tmp is not None for item in staged):
            sync_filesystem(store._tmp_dir)
        renamed: set[Path] = set()
        fresh: list[Path] = []
        with store._lock:  # renames are ordered against quarantine and delete
            # the cache gives way to verified data only, as much as arrived (store.room_for_arrivals)
            store.room_for_arrivals(sum(item.size for item in staged if item.tmp is not None))
            try:
                for item in staged:
                    if item.tmp is None:
                        continue
                    parent = item.dest.parent
                    if parent not in store._made_dirs:
                        parent.mkdir(parents=True, exist_ok=True)  # ENOSPC here too: undone below
                        store._made_dirs.add(parent)
                    if not item.dest.exists():
                        fresh.append(item.dest)
                    os.replace(item.tmp, item.dest)
                    item.tmp = None
                    renamed.add(parent)
                    self.written += 1
                store._record_chunks([(item.chunk_id, item.size) for item in staged])
            except BaseException:
                # Files without index rows would look present to a resumed transfer (which then
                # never sends them) yet lost to complete(): take back what this group added,
                # whether a rename, a directory or the index write failed.
                for path in fresh:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                raise
        with self._lock:
            self._renamed_dirs |= renamed

    def commit(self) -> None:
        """Make every staged chunk durable and visible (blocking)."""
        self._commit_group()
        with self._lock:
            dirs, self._renamed_dirs = self._renamed_dirs, set()
        if not dirs:
            return
        with disk_full_is_capacity(self._store.root, 0):
            if SYNCFS is not None:
                sync_filesystem(self._store._tmp_dir)
            else:
                for d in dirs:
                    fsync_dir(d)

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
