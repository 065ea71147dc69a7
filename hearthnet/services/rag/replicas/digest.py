"""The digest a signed ``rag.document.ingested`` event carries of its document: what a replica checks
the chunks and vectors it copied against, whoever served them.

``blake3`` over, for each chunk in chunk order (``chunk_index``, then id): the chunk id, its text and
its metadata as canonical msgpack (keys sorted, ``chunk_id`` left out), each prefixed by its length
(8 bytes little-endian), then its vector as float32 little-endian.  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import msgpack
import numpy as np

__all__ = ["canonical_metadata", "document_digest"]

PREFIX = "blake3:"


def canonical_metadata(metadata: Mapping[str, Any]) -> bytes:
    """A chunk's metadata as msgpack with sorted keys (floats as float64), without ``chunk_id``."""
    items = sorted((str(k), v) for k, v in metadata.items() if k != "chunk_id")
    return bytes(msgpack.packb(dict(items), use_bin_type=True))


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "little") + data


def document_digest(
    ids: Sequence[str], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]], vectors: np.ndarray
) -> str:
    """``blake3:<hex>`` of a document's chunks, in the order given (the caller's chunk order)."""
    vecs = np.ascontiguousarray(np.asarray(vectors, dtype="<f4"))
    if not (len(ids) == len(texts) == len(metadatas) == (vecs.shape[0] if vecs.ndim == 2 else 0)):
        raise ValueError("ids, texts, metadata and vectors must be of one length")
    h = blake3.blake3()
    h.update(len(ids).to_bytes(8, "little"))
    for i, chunk_id in enumerate(ids):
        h.update(_framed(chunk_id.encode()))
        h.update(_framed(texts[i].encode()))
        h.update(_framed(canonical_metadata(metadatas[i])))
        h.update(_framed(vecs[i].tobytes()))
    return PREFIX + h.hexdigest()
