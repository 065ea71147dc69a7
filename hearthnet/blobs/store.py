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
The store is built of parts along the data's route: the shared state and index
(:mod:`.core`), writes (:mod:`.writes`, with the chunks arriving from a peer staged
by :mod:`.incoming`), reads (:mod:`.reads`), and space: pins, deletes, garbage
collection and the cap (:mod:`.space`).  File-level helpers live in :mod:`.disk`.
"""

from __future__ import annotations

from hearthnet.blobs.core import DEFAULT_STALE_AFTER_S, BlobInfo, CorruptBlob
from hearthnet.blobs.incoming import IncomingChunks
from hearthnet.blobs.manifest import ReassemblyCheck
from hearthnet.blobs.reads import BlobReads
from hearthnet.blobs.space import BlobSpace
from hearthnet.blobs.writes import BlobWrites

__all__ = [
    "DEFAULT_STALE_AFTER_S",
    "BlobInfo",
    "BlobStore",
    "CorruptBlob",
    "IncomingChunks",
    "ReassemblyCheck",
]


class BlobStore(BlobWrites, BlobReads, BlobSpace):
    """Content-addressed chunk store with manifests, pinning and LRU garbage collection."""
