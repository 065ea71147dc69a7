"""Chunks of one blob arriving from a peer: verified, written in parallel, durable in groups."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from hearthnet.blobs.disk import SYNCFS, disk_full_is_capacity, fsync_dir, intact, sync_filesystem, write_temp
from hearthnet.blobs.manifest import verify_chunk

__all__ = ["INCOMING_GROUP", "ChunkSink", "IncomingChunks", "StagedChunk"]

INCOMING_GROUP: Final = 16
"""Chunks an :class:`IncomingChunks` writes before making them durable together (4 MiB)."""


@dataclass
class StagedChunk:
    """A verified chunk waiting in a temporary file for its group to be published."""

    chunk_id: str
    size: int
    dest: Path
    tmp: str | None
    """Temporary file holding the bytes (``None``: an intact copy was already stored, or renamed)."""
    renamed: bool = False
    """Moved into place by :meth:`ChunkSink.publish_chunks`."""


class ChunkSink(Protocol):
    """What :class:`IncomingChunks` needs of the store it writes into (its public interface)."""

    @property
    def root(self) -> Path: ...

    @property
    def tmp_dir(self) -> Path: ...

    def chunk_path(self, chunk_id: str) -> Path: ...

    def hold(self, chunk_ids: list[str]) -> None: ...

    def release(self, chunk_ids: list[str]) -> None: ...

    def publish_chunks(self, staged: Sequence[StagedChunk]) -> set[Path]:
        """Rename the group's files into place and index them; the directories renamed into."""
        ...


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

    def __init__(self, store: ChunkSink, group: int) -> None:
        if group < 1:
            raise ValueError("group must be at least 1")
        self._store = store
        self._group = group
        self._lock = threading.Lock()
        self._staged: list[StagedChunk] = []
        self._renamed_dirs: set[Path] = set()
        self.added = 0
        """Chunks accepted so far (verified; durable after the next commit)."""
        self.written = 0
        """Chunks that were not stored yet and were written."""

    def add(self, chunk_id: str, data: bytes) -> None:
        """Verify ``data`` against ``chunk_id`` and stage it; a mismatch is ``BadRequest``."""
        store = self._store
        verify_chunk(chunk_id, data)
        dest = store.chunk_path(chunk_id)
        store.hold([chunk_id])
        try:
            present = intact(dest, chunk_id)  # a damaged copy (even of the right size) is replaced
            tmp: str | None = None
            if not present:
                with disk_full_is_capacity(store.root, len(data)):
                    tmp = write_temp(store.tmp_dir, (data,), fsync=SYNCFS is None)
        except BaseException:
            store.release([chunk_id])
            raise
        with self._lock:
            self._staged.append(StagedChunk(chunk_id, len(data), dest, tmp))
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

    def _publish(self, staged: list[StagedChunk]) -> None:
        """Durable contents, then the store's renames and index transaction (caller discards leftovers)."""
        store = self._store
        if SYNCFS is not None and any(item.tmp is not None for item in staged):
            sync_filesystem(store.tmp_dir)
        try:
            renamed = store.publish_chunks(staged)
        finally:
            self.written += sum(1 for item in staged if item.renamed)
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
                sync_filesystem(self._store.tmp_dir)
            else:
                for d in dirs:
                    fsync_dir(d)

    def close(self) -> None:
        """Drop whatever is staged and not committed (its temporary files are deleted)."""
        with self._lock:
            staged, self._staged = self._staged, []
        self._discard(staged)

    def _discard(self, staged: list[StagedChunk]) -> None:
        for item in staged:
            if item.tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(item.tmp)
        self._store.release([item.chunk_id for item in staged])

    def __enter__(self) -> IncomingChunks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
