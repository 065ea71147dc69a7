"""Blob manifests: the map from a document's cid to its ordered chunk ids.

Pure code.  A manifest received from a peer is untrusted input, so
:meth:`Manifest.from_wire` and :meth:`Manifest.from_bytes` check every field
and the consistency of sizes before anything is stored.  The *contents* (that
the chunks really reassemble to ``doc_cid``) can only be checked once the
chunks are present; the store does that in ``BlobStore.complete``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from hearthnet.blobs.cid import CHUNK_SIZE, CidHasher, blob_cid, chunk_cid, is_cid, parse_cid
from hearthnet.errors import BadRequest

__all__ = [
    "MAX_CHUNK_SIZE",
    "MAX_MANIFEST_CHUNKS",
    "MIN_CHUNK_SIZE",
    "Manifest",
    "ManifestBuilder",
    "chunk_count",
    "manifest_for_bytes",
    "split_chunks",
    "verify_chunk",
]

MIN_CHUNK_SIZE: Final = 1
MAX_CHUNK_SIZE: Final = 4 * 1024 * 1024
"""A peer cannot make us hold a chunk larger than this in memory."""
MAX_MANIFEST_CHUNKS: Final = 12_288
"""3 GiB at the default chunk size.  A manifest (and a ``need`` or ``skip`` list) travels
in one link frame: 12 288 ids take ~877 KiB of msgpack, under the default 1 MiB frame
with room for the envelope; ~14 300 would not fit."""

_WIRE_KEYS: Final = frozenset({"doc_cid", "size", "chunk_size", "chunks"})
_EMPTY_CID: Final = blob_cid(b"")


def chunk_count(size: int, chunk_size: int) -> int:
    """``ceil(size / chunk_size)``: how many chunks a document of ``size`` bytes has."""
    return -(-size // chunk_size)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A document's cid, its size, the chunk size and the ordered chunk ids.

    Construction validates: every id is a canonical cid, ``chunk_size`` is in
    ``[MIN_CHUNK_SIZE, MAX_CHUNK_SIZE]``, ``len(chunks) == ceil(size/chunk_size)``
    (at most ``MAX_MANIFEST_CHUNKS``), an empty document has the empty cid, a
    one-chunk document's only chunk *is* the document (same cid), and a short
    last chunk's id appears nowhere else (so each id has one length).
    """

    doc_cid: str
    size: int
    chunk_size: int
    chunks: tuple[str, ...]

    def __post_init__(self) -> None:
        if not is_cid(self.doc_cid):
            raise BadRequest("manifest doc_cid is not a cid")
        if not _is_int(self.size) or self.size < 0:
            raise BadRequest("manifest size must be a non-negative integer")
        if not _is_int(self.chunk_size) or not MIN_CHUNK_SIZE <= self.chunk_size <= MAX_CHUNK_SIZE:
            raise BadRequest(
                f"manifest chunk_size must be an integer in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]"
            )
        if not isinstance(self.chunks, tuple):
            raise BadRequest("manifest chunks must be a tuple of cids")
        expected = chunk_count(self.size, self.chunk_size)
        if expected > MAX_MANIFEST_CHUNKS:
            raise BadRequest(
                f"a document of {self.size} bytes in {self.chunk_size} byte chunks needs {expected} chunks;"
                f" a manifest holds at most {MAX_MANIFEST_CHUNKS}"
                f" ({MAX_MANIFEST_CHUNKS * self.chunk_size} bytes at this chunk size)"
            )
        if len(self.chunks) != expected:
            raise BadRequest(
                f"manifest lists {len(self.chunks)} chunks but size {self.size} "
                f"at chunk_size {self.chunk_size} needs {expected}"
            )
        for index, cid in enumerate(self.chunks):
            if not is_cid(cid):
                raise BadRequest(f"manifest chunk {index} is not a cid")
        if self.size == 0 and self.doc_cid != _EMPTY_CID:
            raise BadRequest("an empty document must have the cid of b''")
        if expected == 1 and self.chunks[0] != self.doc_cid:
            raise BadRequest("a one-chunk document's chunk id must equal its doc_cid")
        if self.size % self.chunk_size and self.chunks[-1] in self.chunks[:-1]:
            raise BadRequest("the short last chunk's id also stands for a full-size chunk")

    def chunk_length(self, index: int) -> int:
        """Exact byte length of chunk ``index`` (the last one may be short)."""
        if not 0 <= index < len(self.chunks):
            raise IndexError(index)
        if index < len(self.chunks) - 1:
            return self.chunk_size
        return self.size - self.chunk_size * index

    def length_of(self, chunk_id: str) -> int:
        """Exact byte length of the chunk ``chunk_id`` (one of this manifest's ids).

        Well defined because only the last chunk may be short, and its id cannot
        appear at a full-size position (checked on construction).
        """
        if self.chunks and chunk_id == self.chunks[-1]:
            return self.chunk_length(len(self.chunks) - 1)
        return self.chunk_size

    def to_wire(self) -> dict[str, Any]:
        """The manifest as a msgpack-ready map (field order fixed)."""
        return {
            "doc_cid": self.doc_cid,
            "size": self.size,
            "chunk_size": self.chunk_size,
            "chunks": list(self.chunks),
        }

    @classmethod
    def from_wire(cls, obj: object) -> Manifest:
        """Strictly rebuild a manifest from its wire map; :class:`BadRequest` if anything is off."""
        if not isinstance(obj, dict):
            raise BadRequest(f"a manifest must be a map, got {type(obj).__name__}")
        keys = set(obj)
        if keys != _WIRE_KEYS:
            missing = sorted(str(k) for k in _WIRE_KEYS - keys)
            extra = sorted(repr(k)[:40] for k in keys - _WIRE_KEYS)
            raise BadRequest(f"manifest fields wrong: missing {missing}, unexpected {extra}")
        chunks = obj["chunks"]
        if not isinstance(chunks, list | tuple):
            raise BadRequest("manifest chunks must be a list of cids")
        if len(chunks) > MAX_MANIFEST_CHUNKS:
            raise BadRequest(
                f"manifest lists {len(chunks)} chunks; a manifest holds at most {MAX_MANIFEST_CHUNKS}"
            )
        return cls(
            doc_cid=obj["doc_cid"],
            size=obj["size"],
            chunk_size=obj["chunk_size"],
            chunks=tuple(chunks),
        )

    def to_bytes(self) -> bytes:
        """Canonical msgpack encoding (deterministic for equal manifests)."""
        packed: bytes = msgpack.packb(self.to_wire(), use_bin_type=True)
        return packed

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Decode :meth:`to_bytes` output with bounded msgpack limits."""
        try:
            obj = msgpack.unpackb(
                data,
                raw=False,
                strict_map_key=True,
                max_bin_len=0,
                max_str_len=256,
                max_array_len=MAX_MANIFEST_CHUNKS,
                max_map_len=16,
                max_ext_len=0,
            )
        except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
            # msgpack's ExtraData, FormatError and StackError are ValueError subclasses.
            raise BadRequest(f"malformed manifest encoding: {type(exc).__name__}") from exc
        return cls.from_wire(obj)

    @property
    def manifest_id(self) -> str:
        """The cid of the canonical encoding: equal manifests have equal ids."""
        return blob_cid(self.to_bytes())


def split_chunks(data: bytes | memoryview, chunk_size: int = CHUNK_SIZE) -> Iterator[memoryview]:
    """The fixed-size chunks of ``data`` as zero-copy views (none for empty data)."""
    if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        raise BadRequest(f"chunk_size must be in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
    view = memoryview(data)
    for start in range(0, len(view), chunk_size):
        yield view[start : start + chunk_size]


class ManifestBuilder:
    """Builds a manifest from chunks fed in order, hashing the whole as it goes."""

    __slots__ = ("_chunk_size", "_chunks", "_done", "_hasher")

    def __init__(self, chunk_size: int = CHUNK_SIZE) -> None:
        if not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
            raise BadRequest(f"chunk_size must be in [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}]")
        self._chunk_size = chunk_size
        self._chunks: list[str] = []
        self._hasher = CidHasher()
        self._done = False

    def add(self, chunk: bytes | bytearray | memoryview) -> str:
        """Feed the next chunk; returns its id.  Only the last chunk may be short."""
        if self._done:
            raise ValueError("a short chunk was already added; it must be the last")
        if not 0 < len(chunk) <= self._chunk_size:
            raise ValueError(f"chunk length {len(chunk)} not in (0, {self._chunk_size}]")
        if len(chunk) < self._chunk_size:
            self._done = True
        cid = chunk_cid(chunk)
        self._chunks.append(cid)
        self._hasher.update(chunk)
        return cid

    def build(self) -> Manifest:
        return Manifest(
            doc_cid=self._hasher.cid(),
            size=self._hasher.length,
            chunk_size=self._chunk_size,
            chunks=tuple(self._chunks),
        )


def manifest_for_bytes(data: bytes | bytearray | memoryview, chunk_size: int = CHUNK_SIZE) -> Manifest:
    """The manifest of ``data`` split into ``chunk_size`` chunks."""
    builder = ManifestBuilder(chunk_size)
    for piece in split_chunks(memoryview(data), chunk_size):
        builder.add(piece)
    return builder.build()


def verify_chunk(chunk_id: str, data: bytes) -> None:
    """``BadRequest`` unless ``data`` is a chunk of allowed size whose BLAKE3 id is ``chunk_id``."""
    parse_cid(chunk_id)
    if len(data) > MAX_CHUNK_SIZE:
        raise BadRequest(f"chunk of {len(data)} bytes exceeds the {MAX_CHUNK_SIZE} byte limit")
    actual = chunk_cid(data)
    if actual != chunk_id:
        raise BadRequest(f"chunk does not match its id: expected {chunk_id}, got {actual}")


class ReassemblyCheck:
    """Hashes the chunks of one manifest as they stream past, to spare re-reading them.

    Feed every chunk in manifest order (:meth:`feed`); :meth:`matches` is true
    only if exactly the manifest's chunks came, in order, each of its exact
    length, and their concatenation hashes to ``doc_cid``.  Anything else
    (a gap, a repeat, a resumed transfer) simply does not match, and
    :meth:`BlobStore.complete` reads the stored chunks back instead.
    """

    __slots__ = ("_broken", "_hasher", "_manifest", "_next")

    def __init__(self, manifest: Manifest) -> None:
        self._manifest = manifest
        self._hasher = CidHasher()
        self._next = 0
        self._broken = False

    def feed(self, chunk_id: str, data: bytes) -> None:
        """The next chunk that passed (its id is verified separately, when it is stored)."""
        m, i = self._manifest, self._next
        if self._broken or i >= len(m.chunks) or m.chunks[i] != chunk_id or len(data) != m.chunk_length(i):
            self._broken = True
            return
        self._hasher.update(data)
        self._next = i + 1

    def matches(self, manifest: Manifest) -> bool:
        """Whether exactly ``manifest``'s chunks were fed, in order, and hash to its ``doc_cid``."""
        return (
            not self._broken
            and manifest == self._manifest
            and self._next == len(manifest.chunks)
            and self._hasher.cid() == manifest.doc_cid
        )
