"""One document's write, laid out before anything is stored: its chunks checked against its
vectors (:class:`DocumentWrite`), where it came from (:class:`DocumentSource`), and the clear
error a write that failed for a full disk becomes (:func:`out_of_space`)."""

from __future__ import annotations

import errno
import json
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hearthnet.errors import BadRequest, CapacityExceeded, DiskFull
from hearthnet.services.rag.chunks import RESERVED_METADATA, Chunk

__all__ = ["CHUNK_KEYS", "DocumentSource", "DocumentWrite", "out_of_space", "user_metadata"]

CHUNK_KEYS = frozenset(RESERVED_METADATA - {"chunk_id", "doc_filename"})
"""Metadata keys every chunk has (``doc_filename`` only when the ingest named the file)."""
_SQLITE_FULL = 13
_NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_MIN_FREE_BYTES = 1 << 20


@dataclass(frozen=True)
class DocumentSource:
    """Where a document came from, as ``rag.list_documents`` shows it."""

    filename: str | None = None
    pages: int | None = None
    ingested_by: str | None = None
    replaces: str | None = None
    """A document of the corpus this one takes the place of: it leaves in the transaction that
    makes this one visible (a query sees one or the other, never neither, never both)."""


def user_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's part of a chunk's metadata (what the chunker did not set)."""
    return {k: v for k, v in metadata.items() if k not in RESERVED_METADATA}


@dataclass(frozen=True)
class DocumentWrite:
    """One document's chunks checked and laid out for ChromaDB and the ledger."""

    doc_cid: str
    ids: list[str]
    vectors: np.ndarray
    texts: list[str]
    metadatas: list[dict[str, Any]]
    language: str
    text_bytes: int
    tokens: int
    title: str
    metadata_json: str

    @classmethod
    def of(cls, chunks: Sequence[Chunk], embeddings: np.ndarray, dim: int) -> DocumentWrite:
        vecs = np.asarray(embeddings, dtype=np.float32)
        if not chunks:
            raise BadRequest("document has no chunks")
        if vecs.ndim != 2 or vecs.shape != (len(chunks), dim):
            raise BadRequest(f"embeddings must have shape ({len(chunks)}, {dim}), got {vecs.shape}")
        if not np.isfinite(vecs).all():
            raise BadRequest("embeddings contain NaN or infinity")
        doc_cids = {c.metadata.get("doc_cid") for c in chunks}
        if len(doc_cids) != 1 or not isinstance(next(iter(doc_cids)), str) or not next(iter(doc_cids)):
            raise BadRequest("all chunks of a document must carry the same non-empty doc_cid")
        ids = [c.chunk_id for c in chunks]
        if len(set(ids)) != len(ids):
            raise BadRequest("chunk ids of a document must be unique")
        langs = [str(c.metadata.get("language") or "und") for c in chunks]
        return cls(
            doc_cid=str(next(iter(doc_cids))),
            ids=ids,
            vectors=vecs,
            texts=[c.text for c in chunks],
            metadatas=[dict(c.metadata) for c in chunks],
            language=max(set(langs), key=langs.count),
            text_bytes=sum(len(c.text.encode()) for c in chunks),
            tokens=sum(int(c.metadata.get("tokens") or 0) for c in chunks),
            title=str(chunks[0].metadata.get("doc_title") or ""),
            metadata_json=json.dumps(user_metadata(chunks[0].metadata), sort_keys=True),
        )

    @property
    def size(self) -> int:
        """Bytes it takes at least: its texts and its vectors."""
        return self.text_bytes + int(self.vectors.nbytes)


def out_of_space(root: Path, exc: Exception, *, needed: int) -> CapacityExceeded | None:
    """A clear ``capacity_exceeded`` when a write under ``root`` failed because the disk is full.

    SQLite says so by error code, the OS by errno; ChromaDB's native layer
    only by message, so for it the free space left on the store's disk decides.
    """
    cause: BaseException | None = exc
    by_code = False
    while cause is not None and not by_code:
        if isinstance(cause, sqlite3.Error) and getattr(cause, "sqlite_errorcode", None) == _SQLITE_FULL:
            by_code = True
        elif isinstance(cause, OSError) and cause.errno in _NO_SPACE_ERRNOS:
            by_code = True
        cause = cause.__cause__ or cause.__context__
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        free = -1
    if not by_code and not (0 <= free < max(needed, _MIN_FREE_BYTES)):
        return None
    return DiskFull(
        f"disk full: the corpus store under {root} is out of space ({max(free, 0)} bytes free, "
        f"about {needed} needed): free some space, then ingest again; nothing was stored"
    )
