"""Vectors on the wire: a float32 little-endian row-major matrix as msgpack ``bin``.

Pure functions, no I/O.  ``unpack_vectors`` trusts nothing about its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from hearthnet.errors import BadRequest

__all__ = ["ENCODING", "MAX_DIM", "decode_embeddings", "pack_vectors", "unpack_vectors"]

ENCODING = "f32le"
MAX_DIM = 65_536
_F32LE = np.dtype("<f4")


def pack_vectors(vectors: npt.NDArray[Any]) -> bytes:
    """A 2-d matrix -> its float32 little-endian row-major bytes."""
    arr = np.asarray(vectors)
    if arr.ndim != 2:
        raise BadRequest(f"vectors must be a 2-d matrix, got {arr.ndim} dimensions")
    return np.ascontiguousarray(arr, dtype=_F32LE).tobytes()


def unpack_vectors(data: bytes, dim: int, count: int | None = None) -> npt.NDArray[np.float32]:
    """Bytes -> a float32 ``(n, dim)`` matrix; any length or shape mismatch is ``BadRequest``."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadRequest(f"embeddings must be bytes, got {type(data).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
        raise BadRequest(f"dim must be an integer in 1..{MAX_DIM}")
    row_bytes = dim * _F32LE.itemsize
    size = len(data) if not isinstance(data, memoryview) else data.nbytes
    if size % row_bytes:
        raise BadRequest(f"embeddings are {size} bytes, not a whole number of {dim}-d float32 rows")
    rows = size // row_bytes
    if count is not None and rows != count:
        raise BadRequest(f"embeddings hold {rows} vectors, expected {count}")
    # astype copies into a writable, native-order array the caller owns.
    return np.frombuffer(data, dtype=_F32LE).reshape(rows, dim).astype(np.float32)


def decode_embeddings(output: Mapping[str, Any]) -> npt.NDArray[np.float32]:
    """An ``embed.text`` output map -> a float32 ``(count, dim)`` matrix."""
    encoding = output.get("encoding", ENCODING)
    if encoding != ENCODING:
        raise BadRequest(f"unsupported embeddings encoding {encoding!r:.20}; expected {ENCODING!r}")
    dim = output.get("dim")
    count = output.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        raise BadRequest("count must be an integer")
    data = output.get("embeddings")
    if not isinstance(data, bytes | bytearray):
        raise BadRequest("embeddings must be packed float32 bytes")
    if not isinstance(dim, int):
        raise BadRequest("dim must be an integer")
    return unpack_vectors(bytes(data), dim, count)
