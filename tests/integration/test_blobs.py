"""Blobs between real node processes: byte-identical transfers, trust, resumable puts, bounded memory."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from hearthnet.blobs import BlobStore, Manifest, blob_cid
from hearthnet.blobs.manifest import MAX_MANIFEST_CHUNKS
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.testing import LocalMesh, MeshNode, member_bus, wait_for
from tests.shared_data import PDF_DIR

PDFS = PDF_DIR
NO_MODELS = {"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0"}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("blobs"))
    m.env.update(NO_MODELS)
    try:
        n1, n2, n3 = m.add("n1"), m.add("n2"), m.add("n3")
        m.found(n1)
        m.invite(n1, n2, "trusted")
        m.invite(n1, n3, "member")
        # Two identities driven from this test process: a trusted uploader and a plain member.
        for name, level in (("uploader", "trusted"), ("reader", "member")):
            m.invite(n1, m.add(name), level, start=False)
        m.wait_full_mesh([n1, n2, n3], timeout=60)
        yield m
    finally:
        m.close()


def test_every_shared_pdf_put_on_node1_comes_back_identical_on_node3(mesh: LocalMesh, tmp_path: Path) -> None:
    n1, n3 = mesh.nodes["n1"], mesh.nodes["n3"]
    pdfs = sorted(PDFS.glob("*.pdf"))
    assert len(pdfs) == 20
    for pdf in pdfs:
        cid = n1.cli_json("file", "put", str(pdf))["doc_cid"]
        out = tmp_path / pdf.name
        got = n3.cli_json("file", "get", cid, "--out", str(out))
        assert got["source"] == n1.node_id
        assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(pdf.read_bytes()).digest(), (
            pdf.name
        )
    listed = {b["doc_cid"] for b in n3.cli_json("file", "ls")["blobs"]}
    assert len(listed) == len(pdfs)


def test_push_to_another_node_with_file_put_on(mesh: LocalMesh, tmp_path: Path) -> None:
    n1, n2 = mesh.nodes["n1"], mesh.nodes["n2"]
    pdf = PDFS / "en_paper_creativity_in_ml.pdf"
    out = n1.cli_json("file", "put", str(pdf), "--on", n2.node_id)
    assert out["push"]["doc_cid"] == out["doc_cid"]
    assert out["doc_cid"] in {b["doc_cid"] for b in n2.cli_json("file", "ls")["blobs"]}


@pytest.mark.anyio
async def test_member_that_is_not_trusted_cannot_put(mesh: LocalMesh) -> None:
    n1 = mesh.nodes["n1"]
    manifest = _manifest_for(b"hello hearth")
    async with member_bus(n1, mesh.nodes["reader"].home) as bus:
        with pytest.raises(Unauthorized):
            async with bus.stream(
                "file.put", input={"manifest": manifest.to_wire()}, provider=n1.node_id
            ) as call:
                await call.result()


def _manifest_for(data: bytes, tmp: Path | None = None) -> Manifest:
    from hearthnet.blobs import manifest_for_bytes

    return manifest_for_bytes(data)


@pytest.mark.anyio
async def test_interrupted_put_resumes_sending_only_missing_chunks(mesh: LocalMesh, tmp_path: Path) -> None:
    n2 = mesh.nodes["n2"]
    data = os.urandom(40 * 256 * 1024 + 123)  # 41 chunks
    store = BlobStore(tmp_path / "local-blobs")
    manifest = store.put_bytes(data)
    half = len(manifest.chunks) // 2
    async with member_bus(n2, mesh.nodes["uploader"].home) as bus:
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=n2.node_id
        ) as call:
            first = await call.frames().__anext__()
            assert first["need"] == list(manifest.chunks)
            for chunk_id in manifest.chunks[:half]:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id)})
            # Wait until the receiver has stored what we sent, then walk away mid-put.
            wait_ok = await _wait_chunks_received(n2, half)
            assert wait_ok
        # `file ls` tells the half-received blob apart.
        assert f"{manifest.doc_cid}  {len(data):>12}  incomplete" in n2.cli("file", "ls").stdout
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=n2.node_id
        ) as call:
            first = await call.frames().__anext__()
            assert first["need"] == list(manifest.chunks[half:])
            for chunk_id in first["need"]:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id)})
            await call.end_input()
            result = (await call.result()).output
    assert result["chunks_received"] == len(manifest.chunks) - half
    assert result["doc_cid"] == manifest.doc_cid
    listed = [line for line in n2.cli("file", "ls").stdout.splitlines() if line.startswith(manifest.doc_cid)]
    assert listed == [f"{manifest.doc_cid}  {len(data):>12}"]
    got = n2.cli_json("file", "get", manifest.doc_cid, "--out", str(tmp_path / "back.bin"))
    assert got["source"] == "local"
    assert (tmp_path / "back.bin").read_bytes() == data
    store.close()


@pytest.mark.anyio
async def test_put_with_a_forged_chunk_is_bad_request_and_stores_nothing_wrong(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    n2 = mesh.nodes["n2"]
    data = os.urandom(6 * 256 * 1024)
    store = BlobStore(tmp_path / "forge-blobs")
    manifest = store.put_bytes(data)
    async with member_bus(n2, mesh.nodes["uploader"].home) as bus:
        with pytest.raises(BadRequest, match="does not match its id"):
            async with bus.stream(
                "file.put", input={"manifest": manifest.to_wire()}, provider=n2.node_id
            ) as call:
                need = (await call.frames().__anext__())["need"]
                for i, chunk_id in enumerate(need):
                    body = store.get_chunk(chunk_id)
                    if i == 3:
                        body = bytes([body[0] ^ 1]) + body[1:]
                    await call.send({"chunk_id": chunk_id, "data": body})
                await call.end_input()
                await call.result()
        # The honest chunks stay (a resumed put skips them); the forged one was never written.
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=n2.node_id
        ) as call:
            need = (await call.frames().__anext__())["need"]
            assert manifest.chunks[3] in need
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id)})
            await call.end_input()
            assert (await call.result()).output["doc_cid"] == manifest.doc_cid
    store.close()


async def _wait_chunks_received(node: MeshNode, at_least: int) -> bool:
    def received() -> bool:
        services = node.cli_json("call", "node.stats")["output"]["services"]
        return int(services["file"]["chunks_received"]) >= at_least

    await anyio.to_thread.run_sync(lambda: wait_for(received, timeout=30, what="chunks to land"))
    return True


def _rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@pytest.mark.anyio
async def test_200mb_blob_transfers_with_bounded_receiver_memory(mesh: LocalMesh, tmp_path: Path) -> None:
    n3 = mesh.nodes["n3"]
    # The uploader pushes to n3 through file.put; n3's peak RSS must grow by < 64 MB.
    big = tmp_path / "big.bin"
    with big.open("wb") as f:
        block = os.urandom(1 << 20)
        for i in range(200):
            f.write(block[i:] + block[:i])
    store = BlobStore(tmp_path / "local-blobs")
    manifest = store.put_file(big)
    assert n3.process is not None
    pid = n3.process.pid
    rss_before = _rss_kb(pid, "VmRSS")
    hwm_before = _rss_kb(pid, "VmHWM")
    async with member_bus(n3, mesh.nodes["uploader"].home) as bus:
        # n3 is a plain member, but it accepts a put from a trusted caller.
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=n3.node_id, timeout=600
        ) as call:
            need = (await call.frames().__anext__())["need"]
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id)})
            await call.end_input()
            result = (await call.result()).output
    assert result["chunks_received"] == len(manifest.chunks) == 800
    growth_mb = (max(_rss_kb(pid, "VmHWM"), hwm_before) - max(rss_before, 0)) / 1024
    print(f"receiver RSS before {rss_before / 1024:.1f} MB, peak growth {growth_mb:.1f} MB")
    assert growth_mb < 64
    store.close()


@pytest.mark.anyio
async def test_a_manifest_of_the_most_chunks_allowed_is_put_and_fetched(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    n1, n2 = mesh.nodes["n1"], mesh.nodes["n2"]
    data = os.urandom(MAX_MANIFEST_CHUNKS * 64)  # 64-byte chunks: the largest manifest, cheaply
    store = BlobStore(tmp_path / "many-chunks", chunk_size=64)
    manifest = store.put_bytes(data)
    assert len(manifest.chunks) == MAX_MANIFEST_CHUNKS
    async with member_bus(n1, mesh.nodes["uploader"].home) as bus:
        # The manifest goes out in the request, the `need` list comes back in one frame.
        async with bus.stream(
            "file.put", input={"manifest": manifest.to_wire()}, provider=n1.node_id, timeout=600
        ) as call:
            need = (await call.frames().__anext__())["need"]
            assert len(need) == MAX_MANIFEST_CHUNKS
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": store.get_chunk(chunk_id, touch=False)})
            await call.end_input()
            assert (await call.result()).output["chunks_received"] == MAX_MANIFEST_CHUNKS
    store.close()
    # n2 fetches it with file.read: the manifest comes back in one frame too.
    out = tmp_path / "back.bin"
    got = n2.cli_json("file", "get", manifest.doc_cid, "--out", str(out), timeout=600)
    assert got["source"] == n1.node_id
    assert out.read_bytes() == data


def test_file_ls_lists_more_blobs_than_one_answer_carries(mesh: LocalMesh) -> None:
    n1 = mesh.nodes["n1"]
    many = 6_000
    # Index rows only (all file.list reads), standing in for 6,000 documents held by n1.
    db = sqlite3.connect(n1.home / "blobs" / "index.sqlite3", timeout=30)
    with db:
        db.executemany(
            "INSERT INTO blobs (doc_cid, size, pinned, complete, last_used, changed_at)"
            " VALUES (?, ?, 0, 0, 1, ?)",
            [(blob_cid(b"ls-%d" % i), 1_000 + i, time.time()) for i in range(many)],
        )
    db.close()
    listed = n1.cli_json("file", "ls")
    cids = [b["doc_cid"] for b in listed["blobs"]]
    assert not listed["truncated"] and cids == sorted(set(cids))
    assert {blob_cid(b"ls-%d" % i) for i in range(many)} <= set(cids)
    text = n1.cli("file", "ls").stdout.splitlines()
    assert sum(1 for line in text if line.endswith("  incomplete")) >= many


# -- Hardening: `file get --out` clobbered links' targets, read-only files, FIFOs, devices --------
def _refused(node: MeshNode, *args: str, code: str = "bad_request") -> str:
    """Run a CLI command that must fail: non-zero, one line ``hearthnet: <code>: ...`` on stderr."""
    proc = node.cli(*args, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith(f"hearthnet: {code}: "), lines[0]
    return lines[0]


def _identity(path: Path) -> tuple[int, int, int, int]:
    st = os.lstat(path)
    return st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns


def test_file_get_never_clobbers_what_is_at_out(mesh: LocalMesh, tmp_path: Path) -> None:
    n1 = mesh.nodes["n1"]
    src = tmp_path / "fresh.bin"
    src.write_bytes(os.urandom(300_000))
    cid = n1.cli_json("file", "put", str(src))["doc_cid"]
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"the user's own file")
    link, null_link, fifo, read_only = (tmp_path / n for n in ("link", "null-link", "fifo", "ro.txt"))
    link.symlink_to(outside)
    null_link.symlink_to("/dev/null")
    os.mkfifo(fifo)
    read_only.write_bytes(b"read-only")
    read_only.chmod(0o444)
    never = [(link, "symbolic link"), (null_link, "symbolic link"), (fifo, "FIFO")]
    if os.geteuid() == 0:  # a device node of the null device, in the test's own directory
        device = tmp_path / "null-device"
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        never.append((device, "character device"))
    for dest, words in [*never, (read_only, "already exists")]:
        before = _identity(dest)
        line = _refused(n1, "file", "get", cid, "--out", str(dest))
        assert words in line and str(dest) in line, line
        assert _identity(dest) == before
    for dest, words in never:  # --force replaces a regular file, nothing else
        before = _identity(dest)
        assert words in _refused(n1, "file", "get", cid, "--out", str(dest), "--force")
        assert _identity(dest) == before
    assert "does not exist" in _refused(n1, "file", "get", cid, "--out", str(tmp_path / "no-dir" / "x"))
    # The node itself refuses, whoever calls file.export (here without the CLI's early check).
    export = json.dumps({"doc_cid": cid, "path": str(link), "force": True})
    assert "symbolic link" in _refused(n1, "call", "file.export", "--input", export)
    assert outside.read_bytes() == b"the user's own file" and read_only.read_bytes() == b"read-only"
    got = n1.cli_json("file", "get", cid, "--out", str(read_only), "--force")
    assert got["size"] == src.stat().st_size and read_only.read_bytes() == src.read_bytes()
    assert stat.S_IMODE(read_only.stat().st_mode) == 0o444  # replaced, as protected as it was
    fresh = tmp_path / "new.bin"
    n1.cli_json("file", "get", cid, "--out", str(fresh))
    assert fresh.read_bytes() == src.read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


def test_a_symlink_loop_is_a_one_line_bad_request(mesh: LocalMesh, tmp_path: Path) -> None:
    n1 = mesh.nodes["n1"]
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    src = tmp_path / "ok.txt"
    src.write_bytes(b"a readable file")
    cid = n1.cli_json("file", "put", str(src))["doc_cid"]
    assert "symbolic links" in _refused(n1, "file", "put", str(loop))
    assert "symbolic link" in _refused(n1, "file", "get", cid, "--out", str(loop))
    assert "symbolic links" in _refused(n1, "file", "get", cid, "--out", str(loop / "x"))
    assert sorted(os.listdir(tmp_path)) == ["loop", "ok.txt"]


def test_a_file_name_that_is_not_utf8_is_a_one_line_bad_request(mesh: LocalMesh, tmp_path: Path) -> None:
    n1 = mesh.nodes["n1"]
    src = tmp_path / "ok.txt"
    src.write_bytes(b"a readable file")
    cid = n1.cli_json("file", "put", str(src))["doc_cid"]
    # Byte 0xff: a surrogate escape in Python, the raw byte on the command line.
    odd = os.fsdecode(bytes(tmp_path) + b"/caf\xff.txt")
    Path(odd).write_bytes(b"an oddly named file")
    assert "not valid UTF-8" in _refused(n1, "file", "put", odd)
    assert "not valid UTF-8" in _refused(n1, "file", "get", cid, "--out", odd + ".out")
    assert sorted(os.listdir(tmp_path)) == sorted(["ok.txt", os.path.basename(odd)])


# -- Hardening: a refused `file put --on` kept the blob imported and pinned here -------------------
def test_a_refused_put_on_keeps_nothing_it_imported(mesh: LocalMesh, tmp_path: Path) -> None:
    n1, n3 = mesh.nodes["n1"], mesh.nodes["n3"]  # n3 is a plain member: n1 refuses its file.put
    new, mine = tmp_path / "new.txt", tmp_path / "mine.txt"
    new.write_bytes(os.urandom(600_000))
    mine.write_bytes(os.urandom(600_000))
    kept = n3.cli_json("file", "put", str(mine))["doc_cid"]
    for path in (new, mine):
        _refused(n3, "file", "put", str(path), "--on", n1.node_id, code="unauthorized")
    held = {b["doc_cid"]: b["pinned"] for b in n3.cli_json("file", "ls")["blobs"]}
    assert blob_cid(new.read_bytes()) not in held
    assert held[kept] is True  # the user's file that was here before stays, pinned
    back = tmp_path / "back.txt"
    n3.cli_json("file", "get", kept, "--out", str(back))
    assert back.read_bytes() == mine.read_bytes()
