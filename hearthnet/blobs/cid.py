"""Content identifiers: ``blake3:<64 lowercase hex>`` over exact bytes.

Pure functions only.  A document's ``doc_cid`` is the BLAKE3 of its whole
bytes, so anyone can compute it from the file alone; a chunk's id is the BLAKE3
of the chunk's bytes.  Both use the same form.
"""

from __future__ import annotations

from typing import Final

import blake3

from hearthnet.errors import BadRequest

__all__ = [
    "CHUNK_SIZE",
    "CID_PREFIX",
    "CidHasher",
    "blob_cid",
    "chunk_cid",
    "cid_hex",
    "is_cid",
    "parse_cid",
]

CHUNK_SIZE: Final = 256 * 1024
"""Default fixed chunk size (256 KiB)."""

CID_PREFIX: Final = "blake3:"
_DIGEST_LEN: Final = 32
_HEX_LEN: Final = 2 * _DIGEST_LEN
_HEX_DIGITS: Final = frozenset("0123456789abcdef")


def blob_cid(data: bytes | bytearray | memoryview) -> str:
    """The ``blake3:<hex>`` id of ``data`` (a whole document)."""
    return CID_PREFIX + blake3.blake3(data).hexdigest()


def chunk_cid(data: bytes | bytearray | memoryview) -> str:
    """The id of one chunk; the same function as :func:`blob_cid`."""
    return CID_PREFIX + blake3.blake3(data).hexdigest()


def is_cid(value: object) -> bool:
    """Whether ``value`` is a well-formed, canonical (lowercase) cid string."""
    return (
        isinstance(value, str)
        and len(value) == len(CID_PREFIX) + _HEX_LEN
        and value.startswith(CID_PREFIX)
        and _HEX_DIGITS.issuperset(value[len(CID_PREFIX) :])
    )


def parse_cid(value: object) -> bytes:
    """The 32-byte digest named by ``value``; :class:`BadRequest` if malformed."""
    if not is_cid(value):
        shown = value[:80] if isinstance(value, str) else type(value).__name__
        raise BadRequest(f"not a cid (expected 'blake3:' + 64 lowercase hex digits): {shown!r}")
    assert isinstance(value, str)
    return bytes.fromhex(value[len(CID_PREFIX) :])


def cid_hex(value: object) -> str:
    """The hex part of a validated cid (safe to use as a file name)."""
    parse_cid(value)
    assert isinstance(value, str)
    return value[len(CID_PREFIX) :]


class CidHasher:
    """Incremental hasher: feed bytes in pieces, get the cid of their concatenation."""

    __slots__ = ("_hasher", "_length")

    def __init__(self) -> None:
        self._hasher = blake3.blake3()
        self._length = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        self._hasher.update(data)
        self._length += len(data)

    @property
    def length(self) -> int:
        """Number of bytes fed so far."""
        return self._length

    def cid(self) -> str:
        """The cid of everything fed so far (the hasher stays usable)."""
        return CID_PREFIX + self._hasher.hexdigest()
