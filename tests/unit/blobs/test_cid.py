"""Pure parts of the blob store: cids, chunking and manifests."""

from __future__ import annotations

import blake3
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hearthnet.blobs as blobs
from hearthnet.blobs import (
    CHUNK_SIZE,
    CidHasher,
    Manifest,
    blob_cid,
    chunk_cid,
    manifest_for_bytes,
    parse_cid,
)
from hearthnet.blobs.cid import is_cid
from hearthnet.blobs.manifest import MAX_MANIFEST_CHUNKS, ManifestBuilder, chunk_count, split_chunks
from hearthnet.errors import BadRequest

EMPTY = blob_cid(b"")


def test_exported_names() -> None:
    assert sorted(blobs.__all__) == sorted(
        [
            "CHUNK_SIZE",
            "MAX_CHUNK_SIZE",
            "BlobInfo",
            "BlobStore",
            "CidHasher",
            "CorruptBlob",
            "Manifest",
            "ManifestBuilder",
            "ReassemblyCheck",
            "blob_cid",
            "chunk_cid",
            "is_cid",
            "manifest_for_bytes",
            "parse_cid",
        ]
    )
    for name in blobs.__all__:
        assert hasattr(blobs, name)


def test_chunk_size_is_256_kib() -> None:
    assert CHUNK_SIZE == 262_144


def test_cid_is_blake3_of_the_bytes() -> None:
    data = b"hello hearth"
    assert blob_cid(data) == "blake3:" + blake3.blake3(data).hexdigest()
    assert chunk_cid(data) == blob_cid(data)
    assert parse_cid(blob_cid(data)) == blake3.blake3(data).digest()


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "blake3:",
        "sha256:" + "0" * 64,
        "blake3:" + "0" * 63,
        "blake3:" + "0" * 65,
        "blake3:" + "A" * 64,
        "blake3:" + "g" * 64,
        "BLAKE3:" + "0" * 64,
        None,
        b"blake3:" + b"0" * 64,
        42,
    ],
)
def test_parse_cid_rejects_malformed(bad: object) -> None:
    assert not is_cid(bad)
    with pytest.raises(BadRequest):
        parse_cid(bad)


@given(st.lists(st.binary(max_size=300), max_size=8))
def test_streaming_hasher_equals_one_shot(pieces: list[bytes]) -> None:
    hasher = CidHasher()
    for piece in pieces:
        hasher.update(piece)
    whole = b"".join(pieces)
    assert hasher.cid() == blob_cid(whole)
    assert hasher.length == len(whole)


def _sizes(chunk_size: int) -> st.SearchStrategy[int]:
    edges = [0, 1, chunk_size - 1, chunk_size, chunk_size + 1, 3 * chunk_size - 1, 3 * chunk_size]
    edges += [3 * chunk_size + 1]
    return st.one_of(st.sampled_from(edges), st.integers(min_value=0, max_value=8 * chunk_size))


@given(st.data(), st.sampled_from([1, 7, 64, 1000]))
def test_chunk_and_reassemble_round_trip(data: st.DataObject, chunk_size: int) -> None:
    size = data.draw(_sizes(chunk_size))
    payload = data.draw(st.binary(min_size=size, max_size=size))
    pieces = [bytes(p) for p in split_chunks(payload, chunk_size)]
    manifest = manifest_for_bytes(payload, chunk_size)
    assert b"".join(pieces) == payload
    assert len(pieces) == chunk_count(size, chunk_size) == len(manifest.chunks)
    assert all(len(p) == chunk_size for p in pieces[:-1])
    assert [chunk_cid(p) for p in pieces] == list(manifest.chunks)
    assert [manifest.chunk_length(i) for i in range(len(pieces))] == [len(p) for p in pieces]
    assert manifest.doc_cid == blob_cid(payload)
    assert manifest.size == size
    assert Manifest.from_wire(manifest.to_wire()) == manifest
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest


def test_empty_document_has_zero_chunks() -> None:
    manifest = manifest_for_bytes(b"")
    assert manifest == Manifest(doc_cid=EMPTY, size=0, chunk_size=CHUNK_SIZE, chunks=())


@given(st.binary(max_size=5000), st.sampled_from([16, 256, 4096]))
def test_manifest_id_is_deterministic(payload: bytes, chunk_size: int) -> None:
    first = manifest_for_bytes(payload, chunk_size)
    second = manifest_for_bytes(bytes(payload), chunk_size)
    assert first.manifest_id == second.manifest_id
    assert first.to_bytes() == second.to_bytes()
    assert Manifest.from_bytes(first.to_bytes()).manifest_id == first.manifest_id
    assert first.manifest_id == blob_cid(first.to_bytes())


def test_manifest_id_depends_on_chunk_size() -> None:
    payload = bytes(range(256)) * 10
    assert manifest_for_bytes(payload, 100).manifest_id != manifest_for_bytes(payload, 200).manifest_id


def test_builder_rejects_short_chunk_before_the_end() -> None:
    builder = ManifestBuilder(4)
    builder.add(b"ab")
    with pytest.raises(ValueError):
        builder.add(b"cdef")


def _wire(**changes: object) -> dict[str, object]:
    good = manifest_for_bytes(b"x" * 10, 4).to_wire()
    good.update(changes)
    return good


C = blob_cid(b"c")


@pytest.mark.parametrize(
    "wire",
    [
        _wire(chunks=[C, C]),  # too few chunks for size 10 / 4
        _wire(chunks=[C, C, C, C]),  # too many
        _wire(size=13),  # 13 needs 4 chunks
        _wire(size=-1),
        _wire(size=True),
        _wire(size=10.0),
        _wire(chunk_size=0),
        _wire(chunk_size=64 * 1024 * 1024),
        _wire(doc_cid="blake3:xyz"),
        _wire(chunks=[C, "nope", C]),
        _wire(chunks="abc"),
        _wire(extra=1),
        {"doc_cid": EMPTY, "size": 0, "chunk_size": 4},
        {"doc_cid": C, "size": 0, "chunk_size": 4, "chunks": []},  # empty doc, wrong cid
        {"doc_cid": C, "size": 3, "chunk_size": 4, "chunks": [blob_cid(b"d")]},  # one chunk != doc
        [EMPTY, 0, 4, []],
        None,
    ],
)
def test_from_wire_rejects_inconsistent_manifests(wire: object) -> None:
    with pytest.raises(BadRequest):
        Manifest.from_wire(wire)


def test_from_wire_accepts_a_valid_manifest() -> None:
    assert Manifest.from_wire(_wire()).size == 10


def test_from_wire_bounds_the_chunk_list() -> None:
    wire = {"doc_cid": C, "size": 1, "chunk_size": 1, "chunks": [C] * (MAX_MANIFEST_CHUNKS + 1)}
    with pytest.raises(BadRequest):
        Manifest.from_wire(wire)


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\x93\x01\x02\x03", msgpack.packb({"doc_cid": b"\x00" * 10}), b"\x80\x80"],
)
def test_from_bytes_rejects_garbage(data: bytes) -> None:
    with pytest.raises(BadRequest):
        Manifest.from_bytes(data)


def test_manifest_constructor_validates() -> None:
    with pytest.raises(BadRequest):
        Manifest(doc_cid=EMPTY, size=0, chunk_size=4, chunks=[])  # type: ignore[arg-type]


def test_a_short_last_chunk_cannot_also_stand_for_a_full_chunk() -> None:
    a, short = b"a" * 4, b"b" * 2
    with pytest.raises(BadRequest, match="short last chunk"):
        Manifest(blob_cid(b"doc"), 10, 4, (chunk_cid(short), chunk_cid(a), chunk_cid(short)))
    ok = Manifest(blob_cid(a + a + short), 10, 4, (chunk_cid(a), chunk_cid(a), chunk_cid(short)))
    assert [ok.length_of(c) for c in ok.chunks] == [4, 4, 2]
    full = manifest_for_bytes(b"c" * 8, 4)
    assert [full.length_of(c) for c in full.chunks] == [4, 4]


@given(st.binary(max_size=40), st.integers(1, 8))
def test_length_of_agrees_with_the_chunks(payload: bytes, chunk_size: int) -> None:
    manifest = manifest_for_bytes(payload, chunk_size)
    for piece in split_chunks(payload, chunk_size):
        assert manifest.length_of(chunk_cid(piece)) == len(piece)


def test_the_largest_manifest_fits_one_link_frame_with_room() -> None:
    """A manifest, a ``need`` list and a ``skip`` list each travel in one frame."""
    from hearthnet.transport.session import TAG_LEN
    from hearthnet.wire.codec import pack
    from hearthnet.wire.frames import DEFAULT_MAX_FRAME, HEADER_LEN

    ids = [blob_cid(i.to_bytes(4, "big")) for i in range(MAX_MANIFEST_CHUNKS)]
    size = MAX_MANIFEST_CHUNKS * CHUNK_SIZE
    wire = {"doc_cid": blob_cid(b"big"), "size": size, "chunk_size": CHUNK_SIZE, "chunks": ids}
    request = {
        "t": "req",
        "id": 2**32,
        "capability": "file.put",
        "version": [1, 0],
        "params": {},
        "input": {"manifest": wire, "pin": True},
        "deadline_ms": 600_000,
        "trace_id": "f" * 32,
        "stream": True,
    }
    assert Manifest.from_wire(wire).size == 3 * 1024**3
    assert len(pack(request)) + TAG_LEN + HEADER_LEN < DEFAULT_MAX_FRAME - 64 * 1024
    with pytest.raises(BadRequest, match="at most 12288"):
        Manifest.from_wire({**wire, "size": size + 1, "chunks": [*ids, ids[0]]})
