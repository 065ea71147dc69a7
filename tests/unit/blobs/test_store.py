"""The on-disk blob store, with real files in temporary directories."""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearthnet.blobs import (
    BlobStore,
    CorruptBlob,
    Manifest,
    ReassemblyCheck,
    blob_cid,
    chunk_cid,
    manifest_for_bytes,
)
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound
from tests.shared_data import PDF_DIR

PDFS = sorted(PDF_DIR.glob("*.pdf"))
SMALL = 64  # chunk size for tests that want many chunks from little data


@pytest.fixture
def store(tmp_path: Path) -> Iterator[BlobStore]:
    with BlobStore(tmp_path / "blobs") as s:
        yield s


def small_store(root: Path, **kwargs: object) -> BlobStore:
    return BlobStore(root, chunk_size=SMALL, **kwargs)  # type: ignore[arg-type]


def chunk_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "chunks").rglob("*") if p.is_file())


def flip_bit(path: Path, bit: int) -> None:
    data = bytearray(path.read_bytes())
    data[(bit // 8) % len(data)] ^= 1 << (bit % 8)
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------- round trips


@pytest.mark.skipif(not PDFS, reason="shared PDF corpus not present")
@pytest.mark.parametrize("pdf", PDFS, ids=[p.name for p in PDFS])
def test_real_pdf_round_trip(store: BlobStore, pdf: Path, tmp_path: Path) -> None:
    original = pdf.read_bytes()
    manifest = store.put_file(pdf)
    assert manifest.doc_cid == blob_cid(original)
    assert manifest.size == len(original)
    assert store.has_blob(manifest.doc_cid)
    assert b"".join(store.iter_blob(manifest.doc_cid)) == original
    assert store.read_blob(manifest.doc_cid) == original
    out = tmp_path / "out.pdf"
    store.export(manifest.doc_cid, out)
    assert out.read_bytes() == original
    assert store.get_manifest(manifest.doc_cid) == manifest


@given(st.data())
@settings(max_examples=40, deadline=None)
def test_store_round_trip_random_sizes(data: st.DataObject) -> None:
    edges = [0, 1, SMALL - 1, SMALL, SMALL + 1, 4 * SMALL - 1, 4 * SMALL, 4 * SMALL + 1]
    size = data.draw(st.one_of(st.sampled_from(edges), st.integers(0, 10 * SMALL)))
    payload = data.draw(st.binary(min_size=size, max_size=size))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = root / "src.bin"
        src.write_bytes(payload)
        with small_store(root / "blobs") as store:
            from_file = store.put_file(src)
            from_bytes = store.put_bytes(payload)
            assert from_file == from_bytes == manifest_for_bytes(payload, SMALL)
            chunks = list(store.iter_blob(from_file.doc_cid))
            assert b"".join(chunks) == payload
            assert all(len(c) == SMALL for c in chunks[:-1])
            assert store.usage_bytes() == sum(len(store.get_chunk(c)) for c in set(from_file.chunks))


def test_empty_blob(store: BlobStore, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    manifest = store.put_file(empty)
    assert manifest.chunks == () and manifest.doc_cid == blob_cid(b"")
    assert store.has_blob(manifest.doc_cid)
    assert list(store.iter_blob(manifest.doc_cid)) == []
    store.export(manifest.doc_cid, tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == b""


def test_peer_flow_manifest_then_chunks(tmp_path: Path) -> None:
    payload = os.urandom(5 * SMALL + 3)
    manifest = Manifest.from_wire(manifest_for_bytes(payload, SMALL).to_wire())
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        assert not store.has_blob(manifest.doc_cid)
        assert store.missing_chunks(manifest) == list(manifest.chunks)
        with pytest.raises(BadRequest, match="missing"):
            store.complete(manifest.doc_cid)
        assert store.get_manifest(manifest.doc_cid) == manifest  # kept for the fetch to go on
        pieces = [payload[i : i + SMALL] for i in range(0, len(payload), SMALL)]
        for cid, piece in zip(manifest.chunks, pieces, strict=True):
            assert store.put_chunk(cid, piece) is True
        assert store.put_chunk(manifest.chunks[0], pieces[0]) is False
        assert store.missing_chunks(manifest) == []
        assert store.complete(manifest.doc_cid) == manifest
        assert store.has_blob(manifest.doc_cid)
        assert store.read_blob(manifest.doc_cid) == payload


def test_complete_drops_a_manifest_that_does_not_reassemble(tmp_path: Path) -> None:
    with small_store(tmp_path / "b") as store:
        a, b = b"a" * SMALL, b"b" * 5
        bogus = Manifest(
            doc_cid=blob_cid(b"something else"),
            size=SMALL + 5,
            chunk_size=SMALL,
            chunks=(chunk_cid(a), chunk_cid(b)),
        )
        store.put_manifest(bogus)
        store.put_chunk(chunk_cid(a), a)
        store.put_chunk(chunk_cid(b), b)
        with pytest.raises(BadRequest, match="reassemble"):
            store.complete(bogus.doc_cid)
        with pytest.raises(NotFound):
            store.get_manifest(bogus.doc_cid)
        assert not store.has_blob(bogus.doc_cid)
        assert chunk_files(tmp_path / "b") == []


def _pieces(payload: bytes) -> list[bytes]:
    return [payload[i : i + SMALL] for i in range(0, len(payload), SMALL)]


def _fed_check(manifest: Manifest, payload: bytes) -> ReassemblyCheck:
    """A check that saw the whole payload pass, chunk by chunk, in order."""
    check = ReassemblyCheck(manifest)
    for cid, piece in zip(manifest.chunks, _pieces(payload), strict=True):
        check.feed(cid, piece)
    return check


def test_complete_trusts_a_matching_in_order_reassembly_without_reading_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = os.urandom(5 * SMALL + 3)
    manifest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        for cid, piece in zip(manifest.chunks, _pieces(payload), strict=True):
            store.put_chunk(cid, piece)
        check = _fed_check(manifest, payload)
        reads: list[str] = []
        real_read = store._read_chunk
        monkeypatch.setattr(store, "_read_chunk", lambda cid: reads.append(cid) or real_read(cid))
        assert store.complete(manifest.doc_cid, reassembly=check) == manifest
        assert reads == []
        assert store.read_blob(manifest.doc_cid) == payload
        # Without one, every chunk is read back and hashed.
        store.complete(manifest.doc_cid)
        assert reads[-len(manifest.chunks) :] == list(manifest.chunks)


def test_complete_still_checks_missing_chunks_with_a_matching_reassembly(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        check = _fed_check(manifest, payload)
        store.put_chunk(manifest.chunks[0], _pieces(payload)[0])
        with pytest.raises(BadRequest, match="missing 2 of 3"):
            store.complete(manifest.doc_cid, reassembly=check)
        assert not store.has_blob(manifest.doc_cid)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_reassembly_matches_only_the_manifests_exact_bytes_in_order(data: st.DataObject) -> None:
    payload = data.draw(st.binary(min_size=1, max_size=6 * SMALL))
    manifest = manifest_for_bytes(payload, SMALL)
    pieces = list(zip(manifest.chunks, _pieces(payload), strict=True))
    fed = data.draw(
        st.one_of(
            st.just(pieces),
            st.permutations(pieces),
            st.lists(st.sampled_from(pieces), max_size=8),
            st.just(pieces).map(lambda p: [*p[:-1], (p[-1][0], p[-1][1] + b"x")]),
            st.just(pieces).map(lambda p: [*p[:-1], (p[-1][0], bytes([p[-1][1][0] ^ 1]) + p[-1][1][1:])]),
        )
    )
    check = ReassemblyCheck(manifest)
    for cid, piece in fed:
        check.feed(cid, piece)
    assert check.matches(manifest) == (fed == pieces)
    other = manifest_for_bytes(payload + b"!", SMALL)
    assert not check.matches(other)


# ---------------------------------------------------------------- verification


@given(chunk_index=st.integers(0, 4), bit=st.integers(0, 8 * SMALL - 1))
@settings(max_examples=25, deadline=None)
def test_one_bit_flip_is_detected_quarantined_and_refetchable(chunk_index: int, bit: int) -> None:
    payload = os.urandom(5 * SMALL)
    with tempfile.TemporaryDirectory() as tmp, small_store(Path(tmp)) as store:
        manifest = store.put_bytes(payload)
        victim = manifest.chunks[chunk_index]
        path = Path(tmp) / "chunks" / victim[7:9] / victim[9:11] / victim[7:]
        flip_bit(path, bit)

        with pytest.raises(CorruptBlob, match="quarantined") as info:
            store.get_chunk(victim)
        assert info.value.code == "not_found"
        assert not store.has_chunk(victim)
        assert not path.exists()
        assert len(list((Path(tmp) / "quarantine").iterdir())) == 1
        assert not store.has_blob(manifest.doc_cid)
        assert store.missing_chunks(manifest) == [victim]

        piece = payload[chunk_index * SMALL : (chunk_index + 1) * SMALL]
        assert store.put_chunk(victim, piece) is True  # refetched from a peer
        store.complete(manifest.doc_cid)
        assert store.read_blob(manifest.doc_cid) == payload


def test_iteration_never_serves_a_corrupt_chunk(tmp_path: Path) -> None:
    payload = os.urandom(4 * SMALL)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        flip_bit(chunk_files(tmp_path / "b")[0], 5)
        served: list[bytes] = []
        with pytest.raises(CorruptBlob):
            served.extend(store.iter_blob(manifest.doc_cid))
        assert all(chunk_cid(c) in manifest.chunks for c in served)
        assert len(served) < len(manifest.chunks)


def test_export_of_corrupt_blob_leaves_no_file(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    dest_dir = tmp_path / "out"
    dest_dir.mkdir()
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        flip_bit(chunk_files(tmp_path / "b")[-1], 0)
        with pytest.raises(CorruptBlob):
            store.export(manifest.doc_cid, dest_dir / "doc.bin")
    assert list(dest_dir.iterdir()) == []


def test_wrong_cid_write_is_rejected_and_nothing_written(store: BlobStore) -> None:
    data = b"payload"
    with pytest.raises(BadRequest, match="does not match its id"):
        store.put_chunk(blob_cid(b"other"), data)
    with pytest.raises(BadRequest):
        store.put_chunk("blake3:not-hex", data)
    assert chunk_files(store.root) == []
    assert list((store.root / "tmp").iterdir()) == []
    assert store.usage_bytes() == 0
    assert not store.has_chunk(blob_cid(b"other"))


def test_truncated_chunk_is_rewritten_on_put(store: BlobStore) -> None:
    data = os.urandom(1000)
    cid = chunk_cid(data)
    store.put_chunk(cid, data)
    path = chunk_files(store.root)[0]
    path.write_bytes(data[:10])
    assert store.put_chunk(cid, data) is True
    assert store.get_chunk(cid) == data


def test_corrupt_manifest_file_is_reported(store: BlobStore) -> None:
    manifest = store.put_bytes(b"some bytes")
    path = next((store.root / "manifests").iterdir())
    path.write_bytes(b"\xc1garbage")
    with pytest.raises(CorruptBlob):
        store.get_manifest(manifest.doc_cid)


def test_unknown_things_are_not_found(store: BlobStore, tmp_path: Path) -> None:
    cid = blob_cid(b"nothing")
    with pytest.raises(NotFound):
        store.get_manifest(cid)
    with pytest.raises(NotFound):
        store.get_chunk(cid)
    with pytest.raises(NotFound):
        store.read_blob(cid)
    with pytest.raises(NotFound):
        store.export(cid, tmp_path / "x")
    with pytest.raises(NotFound):
        store.pin(cid)
    with pytest.raises(NotFound):
        store.delete(cid)
    assert not store.has_blob(cid)


def test_read_blob_respects_max_bytes(store: BlobStore) -> None:
    manifest = store.put_bytes(b"x" * 100)
    with pytest.raises(BadRequest):
        store.read_blob(manifest.doc_cid, max_bytes=99)
    assert store.read_blob(manifest.doc_cid, max_bytes=100) == b"x" * 100


# ---------------------------------------------------------------- lifecycle


def test_list_and_delete_keep_shared_chunks(tmp_path: Path) -> None:
    shared = os.urandom(SMALL)
    with small_store(tmp_path / "b") as store:
        one = store.put_bytes(shared + b"one", pin=True)
        two = store.put_bytes(shared + b"two")
        infos = {i.doc_cid: i for i in store.list()}
        assert infos[one.doc_cid].pinned and infos[one.doc_cid].complete
        assert not infos[two.doc_cid].pinned and infos[one.doc_cid].size == SMALL + 3
        assert [i.doc_cid for i in store.list(one.doc_cid[:12])] == [one.doc_cid]
        assert len(chunk_files(tmp_path / "b")) == 3
        store.delete(one.doc_cid)
        assert len(chunk_files(tmp_path / "b")) == 2
        assert store.read_blob(two.doc_cid) == shared + b"two"
        assert store.usage_bytes() == SMALL + 3


def test_pinning_prevents_gc(tmp_path: Path) -> None:
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        pinned = store.put_bytes(os.urandom(6 * SMALL), pin=True)
        loose = store.put_bytes(os.urandom(4 * SMALL))
        store.cap_bytes = 5 * SMALL
        assert store.gc() == [loose.doc_cid]
        assert store.has_blob(pinned.doc_cid) and not store.has_blob(loose.doc_cid)
        assert store.usage_bytes() == 6 * SMALL  # over the cap, but everything left is pinned
        store.unpin(pinned.doc_cid)
        assert store.gc() == [pinned.doc_cid]
        assert store.usage_bytes() == 0


def test_gc_evicts_least_recently_used_unpinned_first(tmp_path: Path) -> None:
    with small_store(tmp_path / "b") as store:
        a = store.put_bytes(b"a" * SMALL)
        b = store.put_bytes(b"b" * SMALL)
        c = store.put_bytes(b"c" * SMALL)
        d = store.put_bytes(b"d" * SMALL, pin=True)
        # access order: b is now least recently used, then a, then c
        store.read_blob(a.doc_cid)
        store.get_chunk(c.chunks[0])
        used = {i.doc_cid: i.last_used for i in store.list()}
        assert used[b.doc_cid] < used[a.doc_cid] < used[c.doc_cid]
        store.cap_bytes = 3 * SMALL
        assert store.gc() == [b.doc_cid]
        store.cap_bytes = SMALL
        assert store.gc() == [a.doc_cid, c.doc_cid]
        assert [i.doc_cid for i in store.list()] == [d.doc_cid]


def test_a_transfer_in_progress_reserves_what_it_still_brings(tmp_path: Path) -> None:
    one, two = os.urandom(6 * SMALL), os.urandom(6 * SMALL)
    first = Manifest.from_wire(manifest_for_bytes(one, SMALL).to_wire())
    second = Manifest.from_wire(manifest_for_bytes(two, SMALL).to_wire())
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        store.put_manifest(first, reserve=True)
        with pytest.raises(CapacityExceeded, match=f"transfers in progress will bring {6 * SMALL} more"):
            store.put_manifest(second, reserve=True)
        with pytest.raises(CapacityExceeded):
            store.put_bytes(os.urandom(5 * SMALL))  # a local import sees the reservation too
        pieces = [one[i : i + SMALL] for i in range(0, len(one), SMALL)]
        for cid, piece in list(zip(first.chunks, pieces, strict=True))[:4]:
            store.put_chunk(cid, piece)
        store.put_manifest(first, reserve=True)  # resumed: its own reservation is not counted twice
        store.check_quota(2 * SMALL)  # 4 stored + 2 still coming + 2 more = 8 of 10
        with pytest.raises(CapacityExceeded, match=f"bring {2 * SMALL} more"):
            store.check_quota(5 * SMALL)
        store.release_reservation(first.doc_cid)
        store.put_manifest(second, reserve=True)  # 4 stored + 6 = 10: fits once nothing is reserved
        store.release_reservation(second.doc_cid)
        store.check_quota(6 * SMALL)  # and nothing stays reserved (the incomplete first is stale-GC'd later)


def test_quota_evicts_then_refuses(tmp_path: Path) -> None:
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        store.put_bytes(os.urandom(7 * SMALL), pin=True)
        old = store.put_bytes(os.urandom(2 * SMALL))
        fresh = store.put_bytes(os.urandom(3 * SMALL))  # evicts `old` to fit
        assert not store.has_blob(old.doc_cid) and store.has_blob(fresh.doc_cid)
        with pytest.raises(CapacityExceeded) as info:
            store.check_quota(4 * SMALL)
        assert info.value.code == "capacity_exceeded"
        with pytest.raises(CapacityExceeded):
            store.put_bytes(os.urandom(4 * SMALL))
        store.check_quota(3 * SMALL)  # evicting `fresh` makes room
        assert not store.has_blob(fresh.doc_cid)


def test_gc_collects_stale_incomplete_manifests_and_orphans(tmp_path: Path) -> None:
    now = [1000.0]
    with small_store(tmp_path / "b", stale_after_s=60, clock=lambda: now[0]) as store:
        partial = manifest_for_bytes(os.urandom(3 * SMALL), SMALL)
        store.put_manifest(partial)
        orphan = b"lonely chunk"
        store.put_chunk(chunk_cid(orphan), orphan)
        store.put_manifest(manifest_for_bytes(b"z" * SMALL, SMALL), pin=True)  # pinned: kept
        assert store.gc() == []
        now[0] += 61
        assert store.gc() == [partial.doc_cid]
        assert not store.has_chunk(chunk_cid(orphan))
        assert len(store.list()) == 1


def test_reopen_recovers_index_and_cleans_tmp(tmp_path: Path) -> None:
    root = tmp_path / "b"
    with small_store(root) as store:
        manifest = store.put_bytes(os.urandom(3 * SMALL), pin=True)
    (root / "tmp" / "w-leftover").write_bytes(b"half a chunk")
    chunk_files(root)[1].unlink()
    with small_store(root) as store:
        assert list((root / "tmp").iterdir()) == []
        assert not store.has_blob(manifest.doc_cid)
        assert len(store.missing_chunks(manifest)) == 1
        assert store.usage_bytes() == 2 * SMALL
        assert store.list()[0].pinned


def test_concurrent_put_file_of_the_same_file(tmp_path: Path) -> None:
    src = tmp_path / "src.bin"
    payload = os.urandom(40 * SMALL + 7)
    src.write_bytes(payload)
    with small_store(tmp_path / "b") as store:
        results: list[Manifest] = []
        errors: list[BaseException] = []
        barrier = threading.Barrier(4)

        def worker() -> None:
            try:
                barrier.wait()
                results.append(store.put_file(src))
                assert store.read_blob(results[-1].doc_cid) == payload
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len({m.manifest_id for m in results}) == 1
        assert store.read_blob(results[0].doc_cid) == payload
        assert store.usage_bytes() == len(payload)
        assert len(chunk_files(tmp_path / "b")) == 41
        assert list((tmp_path / "b" / "tmp").iterdir()) == []


@pytest.mark.slow
def test_200_mb_blob_keeps_memory_bounded(tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    block = os.urandom(1024 * 1024)
    with open(src, "wb") as f:
        for i in range(200):
            f.write(i.to_bytes(4, "big") + block[4:])
    with BlobStore(tmp_path / "b") as store:
        tracemalloc.start()
        try:
            manifest = store.put_file(src)
            total = 0
            for chunk in store.iter_blob(manifest.doc_cid):
                total += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert total == 200 * 1024 * 1024 == manifest.size
        assert peak < 16 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"


def test_oversized_chunk_file_is_quarantined_without_reading_it_all(store: BlobStore) -> None:
    data = b"small chunk"
    cid = chunk_cid(data)
    store.put_chunk(cid, data)
    path = chunk_files(store.root)[0]
    with open(path, "wb") as f:
        f.truncate(8 * 1024 * 1024)
    with pytest.raises(CorruptBlob):
        store.get_chunk(cid)
    assert not store.has_chunk(cid)


def test_chunk_put_without_manifest_is_readable(store: BlobStore) -> None:
    data = os.urandom(300)
    cid = chunk_cid(data)
    assert store.put_chunk(cid, data) is True
    assert store.has_chunk(cid)
    assert store.get_chunk(cid) == data
    assert store.usage_bytes() == 300


# -- IncomingChunks: chunks arriving from a peer, durable in groups ----------------------------
def test_incoming_chunks_are_invisible_until_their_group_commits(tmp_path: Path) -> None:
    store = small_store(tmp_path / "s")
    try:
        data = os.urandom(5 * 1024)
        manifest = manifest_for_bytes(data, 1024)
        store.put_manifest(manifest)
        with store.incoming(group=2) as incoming:
            incoming.add(manifest.chunks[0], data[:1024])
            assert not store.has_chunk(manifest.chunks[0])  # staged, not committed
            incoming.add(manifest.chunks[1], data[1024:2048])  # the group is full: committed
            assert store.has_chunk(manifest.chunks[0]) and store.has_chunk(manifest.chunks[1])
            incoming.add(manifest.chunks[2], data[2048:3072])
            assert not store.has_chunk(manifest.chunks[2])
        # closed without commit: the staged chunk is dropped with its temporary file
        assert not store.has_chunk(manifest.chunks[2])
        assert list((tmp_path / "s" / "tmp").iterdir()) == []
        assert store.missing_chunks(manifest) == list(manifest.chunks[2:])
    finally:
        store.close()


def test_incoming_chunks_reject_forgery_and_commit_from_threads(tmp_path: Path) -> None:
    store = small_store(tmp_path / "s")
    try:
        data = os.urandom(40 * 1024)
        manifest = manifest_for_bytes(data, 1024)
        store.put_manifest(manifest)
        parts = [data[i * 1024 : (i + 1) * 1024] for i in range(40)]
        with store.incoming(group=7) as incoming:
            with pytest.raises(BadRequest, match="does not match its id"):
                incoming.add(manifest.chunks[0], parts[1])
            threads = [
                threading.Thread(
                    target=lambda k=k: [incoming.add(manifest.chunks[i], parts[i]) for i in range(k, 40, 4)]
                )
                for k in range(4)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            incoming.commit()
            assert incoming.added == 40 and incoming.written == 40
        assert store.missing_chunks(manifest) == []
        assert store.complete(manifest.doc_cid).doc_cid == manifest.doc_cid
        assert list((tmp_path / "s" / "tmp").iterdir()) == []
        # A second delivery of the same chunks writes nothing new.
        with store.incoming() as again:
            for i in range(40):
                again.add(manifest.chunks[i], parts[i])
            again.commit()
            assert again.added == 40 and again.written == 0
    finally:
        store.close()


def test_a_full_disk_is_capacity_exceeded_and_leaves_nothing_partial(tmp_path: Path) -> None:
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True, timeout=20
    )
    if proc.returncode != 0:
        pytest.skip("mounting a tmpfs was refused here")
    try:
        store = BlobStore(mount / "blobs")
        try:
            data = os.urandom(6 << 20)  # more than the filesystem holds
            with pytest.raises(CapacityExceeded, match=r"^disk full: .* out of space"):
                store.put_bytes(data)
            manifest = manifest_for_bytes(data)
            with (
                pytest.raises(CapacityExceeded, match=r"^disk full: .* out of space"),
                store.incoming() as incoming,
            ):
                for i, cid in enumerate(manifest.chunks):
                    incoming.add(cid, data[i * manifest.chunk_size : (i + 1) * manifest.chunk_size])
                incoming.commit()
            assert list((mount / "blobs" / "tmp").iterdir()) == []
            assert not store.has_blob(manifest.doc_cid)
        finally:
            store.close()
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=20)


# -- a peer's manifest: replaced while incomplete, checked as the transfer used it ---------------
def _made_up(manifest: Manifest) -> Manifest:
    """A manifest a hostile peer could send for the same document: right shape, invented chunk ids."""
    return Manifest(
        manifest.doc_cid,
        manifest.size,
        manifest.chunk_size,
        tuple(chunk_cid(os.urandom(8)) for _ in manifest.chunks),
    )


def _receive(store: BlobStore, manifest: Manifest, payload: bytes) -> ReassemblyCheck:
    """Every chunk of ``payload`` through ``IncomingChunks``, as a transfer writes them."""
    check = ReassemblyCheck(manifest)
    size = manifest.chunk_size
    with store.incoming() as incoming:
        for i, cid in enumerate(manifest.chunks):
            piece = payload[i * size : (i + 1) * size]
            check.feed(cid, piece)
            incoming.add(cid, piece)
        incoming.commit()
    return check


def test_a_made_up_incomplete_manifest_is_replaced_by_the_next_transfer(tmp_path: Path) -> None:
    payload = os.urandom(5 * SMALL + 3)
    honest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(_made_up(honest))  # a hostile peer answered, then broke the stream
        store.put_manifest(honest)
        assert store.get_manifest(honest.doc_cid) == honest
        check = _receive(store, honest, payload)
        assert store.complete(honest.doc_cid, manifest=honest, reassembly=check) == honest
        assert store.read_blob(honest.doc_cid) == payload


def test_complete_checks_the_manifest_the_transfer_used(tmp_path: Path) -> None:
    payload = os.urandom(5 * SMALL + 3)
    honest = manifest_for_bytes(payload, SMALL)
    bogus = _made_up(honest)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(honest)
        store.put_manifest(bogus)  # another transfer stored its manifest meanwhile
        check = _receive(store, honest, payload)
        with pytest.raises(BadRequest, match="missing"):
            store.complete(bogus.doc_cid, manifest=bogus)
        store.complete(honest.doc_cid, manifest=honest, reassembly=check)
        assert store.get_manifest(honest.doc_cid) == honest
        assert store.has_blob(honest.doc_cid)
        assert store.read_blob(honest.doc_cid) == payload
        with pytest.raises(BadRequest, match="not"):
            store.complete(honest.doc_cid, manifest=manifest_for_bytes(b"other", SMALL))


def test_a_complete_manifest_is_not_displaced_by_a_peers_manifest(tmp_path: Path) -> None:
    payload = os.urandom(5 * SMALL + 3)
    with small_store(tmp_path / "b") as store:
        stored = store.put_bytes(payload)
        store.put_manifest(manifest_for_bytes(payload, 2 * SMALL))  # same document, other chunking
        store.put_manifest(_made_up(stored))
        assert store.get_manifest(stored.doc_cid) == stored
        assert store.has_blob(stored.doc_cid)


def test_a_failed_read_back_does_not_delete_a_concurrent_local_put(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = os.urandom(3 * SMALL)
    real = tmp_path / "real.bin"
    real.write_bytes(payload)
    honest = manifest_for_bytes(payload, SMALL)
    junk = [os.urandom(SMALL) for _ in honest.chunks]
    bogus = Manifest(honest.doc_cid, honest.size, SMALL, tuple(chunk_cid(j) for j in junk))
    with small_store(tmp_path / "b") as store:
        store.put_manifest(bogus)
        for piece in junk:
            store.put_chunk(chunk_cid(piece), piece)
        real_read = store._read_chunk
        reads: list[str] = []

        def read_and_import_midway(cid: str) -> bytes:
            reads.append(cid)
            if len(reads) == 2:  # the user's `file put` of the real document lands mid read-back
                store.put_file(real, pin=True)
            return real_read(cid)

        monkeypatch.setattr(store, "_read_chunk", read_and_import_midway)
        with pytest.raises(BadRequest, match="reassemble") as info:
            store.complete(bogus.doc_cid)
        assert "dropped" not in info.value.message
        assert store.has_blob(honest.doc_cid) and store.list()[0].pinned
        assert store.get_manifest(honest.doc_cid) == honest
        monkeypatch.undo()
        assert store.read_blob(honest.doc_cid) == payload


# -- damage found later: the blob becomes incomplete and can be repaired -----------------------
def test_a_damaged_manifest_file_marks_the_blob_incomplete_and_a_transfer_repairs_it(
    tmp_path: Path,
) -> None:
    payload = os.urandom(3 * SMALL + 1)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        path = next((tmp_path / "b" / "manifests").iterdir())
        path.write_bytes(manifest.to_bytes()[:-7])  # torn
        with pytest.raises(CorruptBlob):
            store.read_blob(manifest.doc_cid)
        assert not store.has_blob(manifest.doc_cid)
        store.put_manifest(manifest)  # the next file.put or fetch
        store.complete(manifest.doc_cid, manifest=manifest)
        assert store.read_blob(manifest.doc_cid) == payload


def test_check_held_notices_a_damaged_manifest_and_a_vanished_chunk(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        assert store.check_held(manifest.doc_cid)
        chunk_files(tmp_path / "b")[1].unlink()
        assert store.has_blob(manifest.doc_cid)  # the index does not know yet
        assert not store.check_held(manifest.doc_cid)
        assert not store.has_blob(manifest.doc_cid)
        store.put_bytes(payload)
        assert store.check_held(manifest.doc_cid)
        next((tmp_path / "b" / "manifests").iterdir()).write_bytes(b"\x00garbage")
        assert not store.check_held(manifest.doc_cid)
        assert not store.has_blob(manifest.doc_cid)


def test_a_chunk_vanishing_at_runtime_marks_its_blobs_incomplete(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        usage = store.usage_bytes()
        store.chunk_path(manifest.chunks[1]).unlink()
        with pytest.raises(NotFound):
            store.read_blob(manifest.doc_cid)
        assert not store.has_blob(manifest.doc_cid)
        assert store.usage_bytes() == usage - SMALL
        assert store.missing_chunks(manifest) == [manifest.chunks[1]]
        store.put_chunk(manifest.chunks[1], payload[SMALL : 2 * SMALL])
        store.complete(manifest.doc_cid)
        assert store.read_blob(manifest.doc_cid) == payload


def test_replacing_an_unreadable_complete_manifest_restarts_it_incomplete(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_bytes(payload)
        next((tmp_path / "b" / "manifests").iterdir()).write_bytes(b"\x00garbage")
        junk = [os.urandom(SMALL) for _ in manifest.chunks]
        for piece in junk:
            store.put_chunk(chunk_cid(piece), piece)
        bogus = Manifest(manifest.doc_cid, manifest.size, SMALL, tuple(chunk_cid(j) for j in junk))
        store.put_manifest(bogus)  # a peer's manifest, not checked
        assert not store.has_blob(manifest.doc_cid)
        with pytest.raises(BadRequest, match="reassemble"):
            store.complete(manifest.doc_cid)


def test_complete_does_not_undo_a_quarantine_that_happens_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = os.urandom(4 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        for i, cid in enumerate(manifest.chunks):
            store.put_chunk(cid, payload[i * SMALL : (i + 1) * SMALL])
        real_read = store._read_chunk
        reads: list[str] = []

        def read_then_damage_the_first(cid: str) -> bytes:
            data = real_read(cid)
            reads.append(cid)
            if len(reads) == len(manifest.chunks):  # read back whole; then a reader trips on bit rot
                first = store.chunk_path(manifest.chunks[0])
                flip_bit(first, 3)
                with pytest.raises(CorruptBlob):
                    real_read(manifest.chunks[0])
            return data

        monkeypatch.setattr(store, "_read_chunk", read_then_damage_the_first)
        with pytest.raises(BadRequest, match="lost 1 chunks"):
            store.complete(manifest.doc_cid)
        assert not store.has_blob(manifest.doc_cid)
        assert store.missing_chunks(manifest) == [manifest.chunks[0]]


def test_a_same_size_damaged_chunk_is_rewritten_by_every_writer(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    src = tmp_path / "doc.bin"
    src.write_bytes(payload)
    with small_store(tmp_path / "b") as store:
        manifest = store.put_file(src)
        victim = store.chunk_path(manifest.chunks[1])
        flip_bit(victim, 100)
        store.put_file(src)  # re-importing repairs it
        assert store.read_blob(manifest.doc_cid) == payload
        flip_bit(victim, 7)
        assert store.put_chunk(manifest.chunks[1], payload[SMALL : 2 * SMALL]) is True
        assert store.read_blob(manifest.doc_cid) == payload
        flip_bit(victim, 9)
        with store.incoming() as incoming:
            incoming.add(manifest.chunks[1], payload[SMALL : 2 * SMALL])
            incoming.add(manifest.chunks[2], payload[2 * SMALL :])
            incoming.commit()
            assert incoming.written == 1
        assert store.read_blob(manifest.doc_cid) == payload


# -- quota: counts what is missing, refuses before evicting ------------------------------------
def test_quota_over_the_cap_is_refused_without_evicting_anything(tmp_path: Path) -> None:
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        cached = [store.put_bytes(os.urandom(2 * SMALL)) for _ in range(4)]
        with pytest.raises(CapacityExceeded, match="more than the blob store's") as info:
            store.check_quota(11 * SMALL)
        assert info.value.code == "capacity_exceeded"
        claim = Manifest(
            blob_cid(b"wanted"), 11 * SMALL, SMALL, tuple(chunk_cid(bytes([i])) for i in range(11))
        )
        with pytest.raises(CapacityExceeded):
            store.put_manifest(claim)  # a peer's manifest declaring more than the cap
        assert all(store.has_blob(m.doc_cid) for m in cached)


def test_quota_refuses_without_evicting_when_eviction_cannot_make_room(tmp_path: Path) -> None:
    pinned_payload = os.urandom(4 * SMALL)
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        store.put_bytes(pinned_payload, pin=True)
        partial_payload = os.urandom(3 * SMALL)
        partial = manifest_for_bytes(partial_payload, SMALL)
        store.put_manifest(partial)
        store.put_chunk(partial.chunks[0], partial_payload[:SMALL])  # incomplete: not evictable
        loose = store.put_bytes(os.urandom(2 * SMALL))
        sharer = store.put_bytes(pinned_payload[:SMALL])  # its only chunk is also the pinned blob's
        assert store.usage_bytes() == 7 * SMALL
        with pytest.raises(CapacityExceeded, match="nothing was evicted") as info:
            store.check_quota(6 * SMALL)  # evicting frees only `loose`: 5 stay, 5 + 6 > 10
        assert f"{5 * SMALL} of the {7 * SMALL}" in info.value.message
        assert store.has_blob(loose.doc_cid) and store.has_blob(sharer.doc_cid)
        store.check_quota(5 * SMALL)  # this fits once `loose` goes
        assert not store.has_blob(loose.doc_cid) and store.has_blob(sharer.doc_cid)


def test_reimporting_a_stored_document_needs_no_room(tmp_path: Path) -> None:
    src = tmp_path / "doc.bin"
    src.write_bytes(os.urandom(6 * SMALL))
    with small_store(tmp_path / "b", cap_bytes=10 * SMALL) as store:
        store.put_file(src, pin=True)
        store.put_file(src, pin=True)
        store.put_bytes(src.read_bytes())
        assert store.usage_bytes() == 6 * SMALL


def test_a_manifest_needs_room_only_for_the_chunks_not_stored_yet(tmp_path: Path) -> None:
    payload = os.urandom(8 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    pieces = _pieces(payload)
    with small_store(tmp_path / "b", cap_bytes=11 * SMALL) as store:
        store.put_bytes(os.urandom(3 * SMALL), pin=True)
        for cid, piece in list(zip(manifest.chunks, pieces, strict=True))[:6]:
            store.put_chunk(cid, piece)  # left by an earlier, interrupted transfer
        assert store.missing_bytes(manifest) == 2 * SMALL
        store.put_manifest(manifest)  # 9 held + 2 missing fit; the declared 8 would not
        for cid, piece in list(zip(manifest.chunks, pieces, strict=True))[6:]:
            store.put_chunk(cid, piece)
        store.complete(manifest.doc_cid)
        assert store.read_blob(manifest.doc_cid) == payload


def test_a_document_too_large_for_one_manifest_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    from hearthnet.blobs.manifest import MAX_MANIFEST_CHUNKS

    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(MAX_MANIFEST_CHUNKS * SMALL + 1)  # sparse
    with small_store(tmp_path / "b") as store:
        with pytest.raises(BadRequest, match="at most"):
            store.put_file(huge)
        with pytest.raises(BadRequest, match="at most"):
            store.put_bytes(b"\0" * (MAX_MANIFEST_CHUNKS * SMALL + 1))
        assert chunk_files(tmp_path / "b") == [] and store.list() == []


# -- export: the caller's mistakes are bad_request, the file gets the usual mode ---------------
def test_export_to_a_bad_destination_is_bad_request(store: BlobStore, tmp_path: Path) -> None:
    manifest = store.put_bytes(os.urandom(1000))
    for dest, reason in (
        (tmp_path / "no-such-dir" / "out.bin", "does not exist"),
        (tmp_path, "is a directory"),
        (tmp_path / "blobs" / "index.sqlite3" / "out.bin", "does not exist"),
    ):
        with pytest.raises(BadRequest, match=reason) as info:
            store.export(manifest.doc_cid, dest)
        assert info.value.code == "bad_request"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_an_exported_file_gets_the_mode_the_umask_allows(store: BlobStore, tmp_path: Path) -> None:
    manifest = store.put_bytes(os.urandom(1000))
    for umask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        old = os.umask(umask)
        try:
            store.export(manifest.doc_cid, tmp_path / f"out-{umask:o}.bin")
        finally:
            os.umask(old)
        assert (tmp_path / f"out-{umask:o}.bin").stat().st_mode & 0o777 == mode


def test_export_where_the_file_system_has_no_hard_links_still_never_replaces(
    store: BlobStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FAT and some network mounts refuse link(2): a new file is published by rename after a check."""
    from hearthnet.blobs import destination

    data = os.urandom(3000)
    manifest = store.put_bytes(data)

    def no_hard_links(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(destination.os, "link", no_hard_links)
    store.export(manifest.doc_cid, tmp_path / "new.bin")
    assert (tmp_path / "new.bin").read_bytes() == data
    with pytest.raises(BadRequest, match="already exists"):
        store.export(manifest.doc_cid, tmp_path / "new.bin")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_a_long_non_ascii_name_exports(store: BlobStore, tmp_path: Path) -> None:
    """The temporary name keeps 100 bytes of the name, not 100 characters (up to 400 bytes)."""
    manifest = store.put_bytes(b"x" * 100)
    dest = tmp_path / ("\u00e9" + "\U0001f600" * 63)  # 254 bytes, 64 characters
    store.export(manifest.doc_cid, dest)
    assert dest.read_bytes() == b"x" * 100


def test_import_file_tells_a_new_blob_and_discard_spares_a_pinned_one(
    store: BlobStore, tmp_path: Path
) -> None:
    src = tmp_path / "doc.txt"
    src.write_bytes(b"one document " * 100)
    manifest, new = store.import_file(src)
    assert new
    assert store.import_file(src) == (manifest, False)  # the same bytes again: nothing new
    store.pin(manifest.doc_cid)
    assert not store.discard(manifest.doc_cid)  # pinned meanwhile: kept
    assert store.read_blob(manifest.doc_cid) == src.read_bytes()
    store.unpin(manifest.doc_cid)
    assert store.discard(manifest.doc_cid)
    assert store.list() == [] and chunk_files(store.root) == []
    assert not store.discard(manifest.doc_cid)  # nothing left to discard


def test_export_to_a_full_disk_is_capacity_exceeded(store: BlobStore, tmp_path: Path) -> None:
    import subprocess

    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, timeout=20
    )
    if proc.returncode != 0:
        pytest.skip("mounting a tmpfs was refused here")
    try:
        manifest = store.put_bytes(os.urandom(2 << 20))
        with pytest.raises(CapacityExceeded, match="no room to export") as info:
            store.export(manifest.doc_cid, mount / "out.bin")
        assert info.value.code == "capacity_exceeded"
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=20)


def test_a_made_up_manifest_for_a_damaged_pinned_blob_neither_costs_its_chunks_nor_its_pin(
    tmp_path: Path,
) -> None:
    """A pinned blob loses a chunk file; a peer's made-up manifest replaces the real one and fails.
    The real chunks outlive gc, the pin stays, and the real document can be completed again."""
    from hearthnet.blobs.cid import chunk_cid

    now = [1_000_000.0]
    s = BlobStore(tmp_path / "b", chunk_size=1024, clock=lambda: now[0])
    data = os.urandom(10 * 1024)
    real = s.put_bytes(data, pin=True)
    s.chunk_path(real.chunks[3]).unlink()
    now[0] += 2 * 24 * 3600
    assert not s.check_held(real.doc_cid)
    parts = [os.urandom(2048) for _ in range(4)]
    fake = Manifest(
        doc_cid=real.doc_cid, size=8192, chunk_size=2048, chunks=tuple(chunk_cid(p) for p in parts)
    )
    s.put_manifest(fake)
    for p in parts:
        s.put_chunk(chunk_cid(p), p)
    with pytest.raises(BadRequest, match="reassemble"):
        s.complete(real.doc_cid, manifest=fake)
    s.gc()
    assert sum(s.has_chunk(c) for c in real.chunks) == 9  # only the lost one is missing
    [info] = s.list()
    assert info.pinned and not info.complete
    s.put_manifest(real)  # the next, honest transfer
    s.put_chunk(real.chunks[3], data[3 * 1024 : 4 * 1024])
    s.complete(real.doc_cid, manifest=real)
    assert s.read_blob(real.doc_cid) == data and s.list()[0].pinned
    s.close()


def test_a_transfer_resumed_after_a_day_keeps_what_it_already_has_when_room_is_made(tmp_path: Path) -> None:
    now = [1_000_000.0]
    s = BlobStore(tmp_path / "b", chunk_size=1024, cap_bytes=20 * 1024, clock=lambda: now[0])
    s.put_bytes(os.urandom(4 * 1024), pin=True)
    other = manifest_for_bytes(other_doc := os.urandom(5 * 1024), 1024)  # a stale, abandoned transfer
    s.put_manifest(other)
    for i, c in enumerate(other.chunks):
        s.put_chunk(c, other_doc[i * 1024 : (i + 1) * 1024])
    doc = os.urandom(10 * 1024)
    m = manifest_for_bytes(doc, 1024)
    s.put_manifest(m)
    for i in range(6):  # the first attempt died after 6 of 10 chunks
        s.put_chunk(m.chunks[i], doc[i * 1024 : (i + 1) * 1024])
    now[0] += 25 * 3600
    s.put_bytes(os.urandom(2 * 1024), pin=True)  # 17 KiB held: the 4 missing KiB need room
    s.put_manifest(m)  # the resumed fetch: room is made by collecting stale data, not its own chunks
    assert all(s.has_chunk(c) for c in m.chunks[:6])
    assert not s.has_blob(other.doc_cid)
    for i in range(6, 10):
        s.put_chunk(m.chunks[i], doc[i * 1024 : (i + 1) * 1024])
    s.complete(m.doc_cid, manifest=m)
    assert s.read_blob(m.doc_cid) == doc
    s.close()


# -- the cap gives way only to data that arrived ----------------------------------------------
def _deliver(store: BlobStore, manifest: Manifest, data: bytes) -> None:
    with store.incoming() as incoming:
        for i, cid in enumerate(manifest.chunks):
            if not store.has_chunk(cid):
                incoming.add(cid, data[i * manifest.chunk_size : (i + 1) * manifest.chunk_size])
        incoming.commit()


def test_a_made_up_manifest_evicts_nothing_and_real_chunks_evict_only_what_they_need(tmp_path: Path) -> None:
    with small_store(tmp_path / "b", cap_bytes=24 * SMALL) as store:
        cached = [store.put_bytes(os.urandom(2 * SMALL)) for _ in range(12)]  # the cache is full
        claims = os.urandom(20 * SMALL)
        fake = _made_up(manifest_for_bytes(claims, SMALL))
        store.put_manifest(fake, reserve=True)  # claims 20 chunks: nothing has arrived
        assert all(store.has_blob(m.doc_cid) for m in cached)
        store.release_reservation(fake.doc_cid)

        data = os.urandom(5 * SMALL)
        real = manifest_for_bytes(data, SMALL)
        store.put_manifest(real, reserve=True)
        _deliver(store, real, data)  # 5 chunks arrive: the 3 least recently used blobs make way
        store.release_reservation(real.doc_cid)
        store.complete(real.doc_cid)
        assert [store.has_blob(m.doc_cid) for m in cached] == [False] * 3 + [True] * 9
        assert store.usage_bytes() <= 24 * SMALL


def test_chunks_a_transfer_counts_as_present_are_not_evicted_to_make_room_for_it(tmp_path: Path) -> None:
    with small_store(tmp_path / "b", cap_bytes=8 * SMALL) as store:
        shared = os.urandom(6 * SMALL)
        held = store.put_bytes(shared)
        data = shared + os.urandom(4 * SMALL)  # shares 6 chunks with `held`: 10 in all > the cap
        manifest = manifest_for_bytes(data, SMALL)
        with pytest.raises(CapacityExceeded, match="nothing was evicted"):
            store.put_manifest(manifest, reserve=True)  # refused before anything is sent
        assert store.has_blob(held.doc_cid) and store.usage_bytes() == 6 * SMALL
        fits = shared + os.urandom(2 * SMALL)  # 8 chunks in all: fits
        smaller = manifest_for_bytes(fits, SMALL)
        store.put_manifest(smaller, reserve=True)
        assert store.missing_chunks(smaller) == list(smaller.chunks[6:])
        _deliver(store, smaller, fits)  # making room for 2 evicts nothing it counted as here
        store.release_reservation(smaller.doc_cid)
        assert store.complete(smaller.doc_cid) == smaller
        assert store.usage_bytes() == 8 * SMALL


def test_chunks_whose_index_write_failed_are_taken_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with small_store(tmp_path / "b") as store:
        data = os.urandom(4 * SMALL)
        manifest = manifest_for_bytes(data, SMALL)
        store.put_manifest(manifest, reserve=True)
        real_record = store._record_chunks

        def full(chunks: list[tuple[str, int]]) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(store, "_record_chunks", full)
        with pytest.raises(sqlite3.OperationalError):
            _deliver(store, manifest, data)
        monkeypatch.setattr(store, "_record_chunks", real_record)
        assert store.missing_chunks(manifest) == list(manifest.chunks)  # asked for again, not lost
        _deliver(store, manifest, data)
        store.release_reservation(manifest.doc_cid)
        assert store.complete(manifest.doc_cid) == manifest


def test_a_store_made_before_private_blobs_opens_and_keeps_its_blobs_public(tmp_path: Path) -> None:
    with BlobStore(tmp_path / "s", chunk_size=SMALL) as store:
        kept = store.put_bytes(b"an older blob " * 100, pin=True).doc_cid
    db = sqlite3.connect(tmp_path / "s" / "index.sqlite3")
    with db:  # the table as stores wrote it before the `private` column
        db.execute("ALTER TABLE blobs DROP COLUMN private")
    db.close()
    with BlobStore(tmp_path / "s", chunk_size=SMALL) as store:
        (info,) = store.list()
        assert (info.doc_cid, info.pinned, info.private) == (kept, True, False)
        mine = store.put_bytes(b"a diary " * 100, private=True).doc_cid
        assert store.is_private(mine) and not store.is_private(kept)


def test_a_disk_full_midway_through_a_group_leaves_no_chunk_file_without_its_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload = os.urandom(3 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        refused = store.chunk_path(manifest.chunks[1]).parent
        real_mkdir = Path.mkdir

        def mkdir(self: Path, *args: object, **kwargs: object) -> None:
            if self == refused:
                raise OSError(errno.ENOSPC, "No space left on device", str(self))
            real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "mkdir", mkdir)
        with pytest.raises(CapacityExceeded), store.incoming(group=3) as incoming:
            try:
                for cid, piece in zip(manifest.chunks, _pieces(payload), strict=True):
                    incoming.add(cid, piece)
            finally:
                incoming.commit()
        assert not store.chunk_path(manifest.chunks[0]).exists()  # taken back with its group
        monkeypatch.setattr(Path, "mkdir", real_mkdir)
        assert store.missing_chunks(manifest) == list(manifest.chunks)  # a resumed transfer sends all
        with store.incoming(group=3) as incoming:
            for cid, piece in zip(manifest.chunks, _pieces(payload), strict=True):
                incoming.add(cid, piece)
            incoming.commit()
        assert store.complete(manifest.doc_cid) == manifest
        assert store.read_blob(manifest.doc_cid) == payload


def test_a_chunk_file_left_without_its_row_is_asked_for_again(tmp_path: Path) -> None:
    payload = os.urandom(2 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    with small_store(tmp_path / "b") as store:
        store.put_manifest(manifest)
        for cid, piece in zip(manifest.chunks, _pieces(payload), strict=True):
            store.put_chunk(cid, piece)
        with store._lock:  # as an interrupted write could leave it: the file, no index row
            store._db.execute("DELETE FROM chunks WHERE chunk_id = ?", (manifest.chunks[0],))
        assert store.missing_chunks(manifest) == [manifest.chunks[0]]


def test_what_a_caller_is_told_succeeded_is_committed_with_a_synced_log(tmp_path: Path) -> None:
    with small_store(tmp_path / "b") as store:
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        cid = store.put_bytes(b"a document " * 50).doc_cid
        store.pin(cid)
        store._db.set_trace_callback(None)

    def synced(marker: str) -> bool:
        """The commit of the transaction holding ``marker`` ran under synchronous=FULL."""
        at = next(i for i, s in enumerate(statements) if marker in s)
        full = max(i for i, s in enumerate(statements[:at]) if s.startswith("PRAGMA synchronous"))
        commit = next(i for i, s in enumerate(statements[at:], at) if s == "COMMIT")
        normal = next(i for i, s in enumerate(statements[commit:], commit) if s.startswith("PRAGMA"))
        return (
            statements[full] == "PRAGMA synchronous=FULL"
            and statements[normal] == "PRAGMA synchronous=NORMAL"
        )

    assert synced("INSERT INTO blobs")
    assert synced("UPDATE blobs SET pinned")
