"""The file service between in-process nodes: real buses over authenticated in-memory links, real stores.

A hostile member is a bus whose ``file.read`` answers what it likes; everything
else is the code a node runs.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.blobs import BlobStore, Manifest, blob_cid, chunk_cid, manifest_for_bytes
from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, CapacityExceeded, NotFound, Partition, Unauthorized
from hearthnet.identity import Identity
from hearthnet.services.file import service as file_service
from hearthnet.services.file.service import FileService
from hearthnet.transport import accept_link, initiate_link, memory_stream_pair
from tests.polling import wait_until

COMMUNITY = "hc1:test"
SMALL = 1024

Handler = Callable[[CallContext], Awaitable[dict[str, Any]]]


@dataclass
class Node:
    bus: CapabilityBus
    files: FileService | None = None

    @property
    def id(self) -> str:
        return self.bus.node_id

    @property
    def store(self) -> BlobStore:
        assert self.files is not None
        return self.files.store


@asynccontextmanager
async def nodes(
    tmp: Path,
    names: list[str],
    *,
    hostile: dict[str, Handler] | None = None,
    members: frozenset[str] = frozenset(),
    **store_kw: Any,
) -> AsyncIterator[dict[str, Node]]:
    """Trusted nodes (plain members if named in ``members``), every pair linked; each runs a
    FileService unless it is in ``hostile`` (then its ``file.read`` is that handler)."""
    hostile = hostile or {}
    ids = {name: Identity.generate() for name in names}
    levels = {i.node_id: Level.MEMBER if name in members else Level.TRUSTED for name, i in ids.items()}

    def admit(node_id: str) -> None:
        if node_id not in levels:
            raise Unauthorized("not a member")

    out: dict[str, Node] = {}
    for name, identity in ids.items():
        bus = CapabilityBus(identity, level_of=levels.get, community_id=lambda: COMMUNITY, name=name)
        node = Node(bus)
        if name in hostile:
            bus.register(
                Registration(
                    CapabilityDescriptor("file.read", (1, 0), idempotent=True, streaming=True), hostile[name]
                )
            )
        else:
            node.files = FileService(bus=bus, store=BlobStore(tmp / name, chunk_size=SMALL, **store_kw))
            for registration in node.files.registrations():
                bus.register(registration)
        out[name] = node
    buses = [n.bus for n in out.values()]
    async with anyio.create_task_group() as tg:
        for x, a in enumerate(buses):
            for b in buses[x + 1 :]:
                a_end, b_end = memory_stream_pair()
                links: dict[str, Any] = {}

                async def accept(
                    b: CapabilityBus = b, end: Any = b_end, links: dict[str, Any] = links
                ) -> None:
                    links["b"] = await accept_link(
                        end, identity=b.identity, community_id=COMMUNITY, admit=admit, remote_address="mem"
                    )

                async with anyio.create_task_group() as hs:
                    hs.start_soon(accept)
                    links["a"] = await initiate_link(
                        a_end, identity=a.identity, community_id=COMMUNITY, admit=admit, remote_address="mem"
                    )
                tg.start_soon(a.attach, links["a"])
                tg.start_soon(b.attach, links["b"])
        for bus in buses:
            tg.start_soon(bus.run_announcer)
        await wait_until(
            lambda: all(
                {p.node_id for p in bus.providers("file.read") if not p.is_local}
                >= {o.node_id for o in buses} - {bus.node_id}
                for bus in buses
            )
        )
        try:
            yield out
        finally:
            tg.cancel_scope.cancel()
            for node in out.values():
                if node.files is not None:
                    node.store.close()


def pieces(payload: bytes, size: int) -> list[bytes]:
    return [payload[i : i + size] for i in range(0, len(payload), size)]


def made_up(manifest: Manifest) -> Manifest:
    """Right document, size and chunk size; invented chunk ids."""
    return Manifest(
        manifest.doc_cid,
        manifest.size,
        manifest.chunk_size,
        tuple(chunk_cid(os.urandom(8)) for _ in manifest.chunks),
    )


def poisoner(manifest: Manifest) -> Handler:
    """A member that answers file.read with a made-up manifest, then breaks the stream."""

    async def read(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"manifest": made_up(manifest).to_wire()})
        raise Partition("link lost")

    return read


async def put(bus: CapabilityBus, node: str, manifest: Manifest, chunks: dict[str, bytes]) -> dict[str, Any]:
    """A trusted member's file.put: offer the manifest, send what is asked for."""
    async with bus.stream("file.put", input={"manifest": manifest.to_wire()}, provider=node) as call:
        need = (await call.frames().__anext__())["need"]
        for chunk_id in need:
            await call.send({"chunk_id": chunk_id, "data": chunks[chunk_id]})
        await call.end_input()
        return dict((await call.result()).output)


# -- defect: a made-up manifest blocked every later transfer of the document --------------------
@pytest.mark.anyio
async def test_a_made_up_manifest_does_not_block_a_later_fetch_or_put(tmp_path: Path) -> None:
    payload = os.urandom(5 * SMALL + 7)
    honest = manifest_for_bytes(payload, SMALL)
    chunks = dict(zip(honest.chunks, pieces(payload, SMALL), strict=True))
    async with nodes(tmp_path, ["a", "b", "good", "evil"], hostile={"evil": poisoner(honest)}) as n:
        a, b, good = n["a"].files, n["b"].files, n["good"]
        assert a is not None and b is not None
        # b is poisoned while nobody else holds the document (only the hostile member answers) ...
        with pytest.raises(Partition):
            await b.fetch(honest.doc_cid, hint=n["evil"].id)
        assert b.store.get_manifest(honest.doc_cid) != honest
        # ... and a trusted member's put of the real document still goes through.
        out = await put(good.bus, n["b"].id, honest, chunks)
        assert out["chunks_received"] == len(honest.chunks)
        assert b.store.read_blob(honest.doc_cid) == payload
        # a asks the hostile member first: its manifest is stored, then an honest peer serves.
        good.store.put_bytes(payload)
        result = await a.fetch(honest.doc_cid, hint=n["evil"].id)
        assert result["source"] in {good.id, n["b"].id}
        assert a.store.read_blob(honest.doc_cid) == payload


# -- defect: concurrent puts each fitted the cap alone and overshot it together -------------------
@pytest.mark.anyio
async def test_concurrent_puts_cannot_overshoot_the_cap_together(tmp_path: Path) -> None:
    one, two = os.urandom(6 * SMALL), os.urandom(6 * SMALL)
    first, second = manifest_for_bytes(one, SMALL), manifest_for_bytes(two, SMALL)
    chunks = dict(zip(first.chunks, pieces(one, SMALL), strict=True))
    chunks.update(zip(second.chunks, pieces(two, SMALL), strict=True))
    async with nodes(tmp_path, ["a", "b"], cap_bytes=10 * SMALL) as n:
        a, b = n["a"], n["b"].files
        assert b is not None
        async with a.bus.stream("file.put", input={"manifest": first.to_wire()}, provider=n["b"].id) as call:
            need = (await call.frames().__anext__())["need"]  # b now expects 6 chunks of its 10
            with (
                pytest.raises(CapacityExceeded, match="transfers in progress will bring"),
                anyio.fail_after(30),
            ):
                async with a.bus.stream(
                    "file.put", input={"manifest": second.to_wire()}, provider=n["b"].id
                ) as refused:
                    async for _ in refused.frames():
                        pass
                    await refused.result()
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": chunks[chunk_id]})
            await call.end_input()
            assert (await call.result()).output["chunks_received"] == 6
        assert b.store._reserved == {}  # the finished put holds nothing back
        out = await put(a.bus, n["b"].id, second, chunks)  # the first (unpinned) is evicted for it
        assert out["chunks_received"] == 6 and b.store.read_blob(second.doc_cid) == two
        assert not b.store.has_blob(first.doc_cid)


# -- defect: chunk lengths were never checked against the manifest -------------------------------
@pytest.mark.anyio
async def test_a_chunk_of_the_wrong_length_is_refused_by_fetch_and_put(tmp_path: Path) -> None:
    wanted = blob_cid(b"the document the node wants")
    big = [os.urandom(100_000) for _ in range(8)]
    claim = Manifest(wanted, len(big), 1, tuple(chunk_cid(b) for b in big))  # "8 bytes"

    async def stuffer(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"manifest": claim.to_wire()})
        for index, data in enumerate(big):
            await ctx.send({"index": index, "chunk_id": claim.chunks[index], "data": data})
        raise Partition("link lost")

    async with nodes(tmp_path, ["a", "evil"], hostile={"evil": stuffer}, cap_bytes=64 * SMALL) as n:
        a = n["a"].files
        assert a is not None
        with pytest.raises(BadRequest, match="100000 bytes; the manifest makes it 1"):
            await a.fetch(wanted)
        assert a.store.usage_bytes() == 0
        with pytest.raises(BadRequest, match="100000 bytes; the manifest makes it 1"):
            await put(n["evil"].bus, n["a"].id, claim, dict(zip(claim.chunks, big, strict=True)))
        assert a.store.usage_bytes() == 0
        a.store.put_bytes(b"0123456789")  # the cap was never filled with undeclared bytes


# -- defect: a resumed fetch counted the whole document against the cap again --------------------
@pytest.mark.anyio
async def test_a_resumed_fetch_needs_room_only_for_the_missing_chunks(tmp_path: Path) -> None:
    payload = os.urandom(8 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    parts = pieces(payload, SMALL)

    async def half_then_gone(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"manifest": manifest.to_wire()})
        for index in range(5):
            await ctx.send({"index": index, "chunk_id": manifest.chunks[index], "data": parts[index]})
        return {"doc_cid": manifest.doc_cid}  # and the other three never come

    async with nodes(
        tmp_path, ["a", "flaky", "good"], hostile={"flaky": half_then_gone}, cap_bytes=12 * SMALL
    ) as n:
        a, good = n["a"].files, n["good"]
        assert a is not None
        a.store.put_bytes(os.urandom(4 * SMALL), pin=True)
        with pytest.raises(BadRequest, match="missing 3 of 8"):  # good holds nothing yet
            await a.fetch(manifest.doc_cid, hint=n["flaky"].id)
        assert a.store.missing_bytes(manifest) == 3 * SMALL
        good.store.put_bytes(payload)
        # 9 KiB held + 3 missing fit the 12 KiB cap; the whole 8 would not.
        result = await a.fetch(manifest.doc_cid, hint=good.id)
        assert result["chunks_fetched"] == 3
        assert a.store.read_blob(manifest.doc_cid) == payload


# -- the next peer is tried after a forged chunk; a forged chunk in a put is bad_request ------------
@pytest.mark.anyio
async def test_fetch_moves_on_after_a_forged_chunk(tmp_path: Path) -> None:
    payload = os.urandom(6 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)

    async def forger(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"manifest": manifest.to_wire()})
        for index, data in enumerate(pieces(payload, SMALL)):
            forged = bytes([data[0] ^ 1]) + data[1:] if index == 2 else data
            await ctx.send({"index": index, "chunk_id": manifest.chunks[index], "data": forged})
        return {"doc_cid": manifest.doc_cid}

    async with nodes(tmp_path, ["a", "forger", "good"], hostile={"forger": forger}) as n:
        a, good = n["a"].files, n["good"]
        assert a is not None
        good.store.put_bytes(payload)
        result = await a.fetch(manifest.doc_cid, hint=n["forger"].id)
        assert result["source"] == good.id
        assert a.store.read_blob(manifest.doc_cid) == payload


@pytest.mark.anyio
async def test_fetch_moves_on_from_a_peer_that_repeats_a_chunk(tmp_path: Path) -> None:
    """Each index once: a member that streams the same valid chunk again and again would otherwise
    keep the fetch (and its disk writes) going until the timeout."""
    payload = os.urandom(3 * SMALL)
    manifest = manifest_for_bytes(payload, SMALL)
    sent: list[int] = []

    async def looper(ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"manifest": manifest.to_wire()})
        for _ in range(1000):
            sent.append(0)
            await ctx.send({"index": 0, "chunk_id": manifest.chunks[0], "data": payload[:SMALL]})
        return {"doc_cid": manifest.doc_cid}

    async with nodes(tmp_path, ["a", "looper", "good"], hostile={"looper": looper}) as n:
        a, good = n["a"].files, n["good"]
        assert a is not None
        good.store.put_bytes(payload)
        result = await a.fetch(manifest.doc_cid, hint=n["looper"].id)
        assert result["source"] == good.id and a.store.read_blob(manifest.doc_cid) == payload
        assert len(sent) < 1000


@pytest.mark.anyio
@pytest.mark.parametrize("position", [0, 5, 20, 39])
async def test_a_forged_chunk_in_a_put_is_always_bad_request(tmp_path: Path, position: int) -> None:
    async with nodes(tmp_path, ["a", "up"]) as n:
        for _ in range(3):
            payload = os.urandom(40 * SMALL)
            manifest = manifest_for_bytes(payload, SMALL)
            chunks = dict(zip(manifest.chunks, pieces(payload, SMALL), strict=True))
            victim = manifest.chunks[position]
            chunks[victim] = bytes([chunks[victim][0] ^ 1]) + chunks[victim][1:]
            with pytest.raises(BadRequest, match="does not match its id"):
                await put(n["up"].bus, n["a"].id, manifest, chunks)


# -- a damaged blob is repaired by the next transfer, not reported as held ------------------------
@pytest.mark.anyio
async def test_a_put_repairs_a_blob_whose_manifest_file_was_damaged(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL + 5)
    async with nodes(tmp_path, ["a", "good"]) as n:
        a, good = n["a"].files, n["good"].files
        assert a is not None and good is not None
        manifest = a.store.put_bytes(payload)
        good.store.put_bytes(payload)
        (tmp_path / "a" / "manifests" / f"{manifest.doc_cid[7:]}.msgpack").write_bytes(b"\x00torn")
        await good.push(manifest.doc_cid, n["a"].id)
        assert a.store.read_blob(manifest.doc_cid) == payload


@pytest.mark.anyio
async def test_fetch_refetches_a_chunk_that_vanished(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    async with nodes(tmp_path, ["a", "good"]) as n:
        a, good = n["a"].files, n["good"].files
        assert a is not None and good is not None
        manifest = a.store.put_bytes(payload)
        good.store.put_bytes(payload)
        a.store.chunk_path(manifest.chunks[1]).unlink()
        result = await a.fetch(manifest.doc_cid)
        assert result == {"doc_cid": manifest.doc_cid, "source": n["good"].id, "chunks_fetched": 1}
        assert a.store.read_blob(manifest.doc_cid) == payload


# -- file.list stays inside one frame and pages ---------------------------------------------------
@pytest.mark.anyio
async def test_file_list_of_many_blobs_is_truncated_by_size_and_pages(tmp_path: Path) -> None:
    many = 12_000
    async with nodes(tmp_path, ["a", "reader"]) as n:
        # Index rows only (all file.list reads): stands in for 12,000 stored blobs.
        db = sqlite3.connect(tmp_path / "a" / "index.sqlite3")
        with db:
            db.executemany(
                "INSERT INTO blobs (doc_cid, size, pinned, complete, last_used, changed_at)"
                " VALUES (?, ?, 0, 0, 1, ?)",
                [(blob_cid(i.to_bytes(4, "big")), 123_456_789, time.time()) for i in range(many)],
            )
        db.close()
        seen: list[str] = []
        after = ""
        pages = 0
        while True:
            out = (await n["reader"].bus.call("file.list", input={"after": after}, provider=n["a"].id)).output
            pages += 1
            seen.extend(b["doc_cid"] for b in out["blobs"])
            if not out["truncated"]:
                break
            after = out["blobs"][-1]["doc_cid"]
        assert pages > 1
        assert seen == sorted({blob_cid(i.to_bytes(4, "big")) for i in range(many)})


@pytest.mark.anyio
async def test_file_list_stops_at_its_byte_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_service, "LIST_BUDGET", 1000)
    async with nodes(tmp_path, ["a"]) as n:
        files = n["a"].files
        assert files is not None
        docs = sorted(files.store.put_bytes(os.urandom(10)).doc_cid for _ in range(20))
        first = (await n["a"].bus.call("file.list", input={})).output
        assert first["truncated"] and 0 < len(first["blobs"]) < 20
        seen = [b["doc_cid"] for b in first["blobs"]]
        while True:
            page = (await n["a"].bus.call("file.list", input={"after": seen[-1]})).output
            seen.extend(b["doc_cid"] for b in page["blobs"])
            if not page["truncated"]:
                break
        assert seen == docs
        with pytest.raises(BadRequest):
            await n["a"].bus.call("file.list", input={"after": 3})


# -- stale leftovers are collected at start and then periodically ---------------------------------
def _standalone(store: BlobStore, gc_interval_s: float) -> FileService:
    bus = CapabilityBus(
        Identity.generate(), level_of=lambda _n: None, community_id=lambda: COMMUNITY, name="x"
    )
    return FileService(bus=bus, store=store, gc_interval_s=gc_interval_s)


@pytest.mark.anyio
async def test_the_service_collects_what_the_last_run_left_when_it_starts(tmp_path: Path) -> None:
    now = [1_000.0]
    store = BlobStore(tmp_path / "s", chunk_size=SMALL, stale_after_s=60, clock=lambda: now[0])
    store.put_manifest(manifest_for_bytes(os.urandom(3 * SMALL), SMALL))  # a transfer that died
    now[0] += 61
    files = _standalone(store, gc_interval_s=3600)
    await files.start()
    try:
        await wait_until(lambda: files.gc_runs == 1)
        assert store.list() == []
    finally:
        await files.stop()  # wakes the collector: it does not wait out its hour
    assert files._gc_thread is not None and not files._gc_thread.is_alive()


@pytest.mark.anyio
async def test_the_service_collects_stale_leftovers_periodically(tmp_path: Path) -> None:
    now = [1_000.0]
    store = BlobStore(tmp_path / "s", chunk_size=SMALL, stale_after_s=60, clock=lambda: now[0])
    files = _standalone(store, gc_interval_s=0.01)
    await files.start()
    try:
        later = manifest_for_bytes(os.urandom(2 * SMALL), SMALL)
        store.put_manifest(later)
        runs = files.gc_runs
        await wait_until(lambda: files.gc_runs > runs + 1)
        assert [i.doc_cid for i in store.list()] == [later.doc_cid]  # not stale yet
        now[0] += 61
        await wait_until(lambda: store.list() == [])
    finally:
        await files.stop()


# -- defect: a peer's pin took effect on a manifest it never completed ------------------------------
@pytest.mark.anyio
async def test_a_put_pins_only_a_blob_it_completed(tmp_path: Path) -> None:
    payload = os.urandom(3 * SMALL)
    honest = manifest_for_bytes(payload, SMALL)
    chunks = dict(zip(honest.chunks, pieces(payload, SMALL), strict=True))
    async with nodes(tmp_path, ["a", "b"]) as n:
        a, b = n["a"], n["b"]
        fake = made_up(honest)
        with pytest.raises(BadRequest):  # ends its input without sending anything
            async with a.bus.stream(
                "file.put", input={"manifest": fake.to_wire(), "pin": True}, provider=b.id
            ) as call:
                await call.frames().__anext__()
                await call.end_input()
                await call.result()
        assert [(i.pinned, i.complete) for i in b.store.list()] == [(False, False)]  # the GC may take it
        async with a.bus.stream(
            "file.put", input={"manifest": honest.to_wire(), "pin": True}, provider=b.id
        ) as call:
            need = (await call.frames().__anext__())["need"]
            for chunk_id in need:
                await call.send({"chunk_id": chunk_id, "data": chunks[chunk_id]})
            await call.end_input()
            await call.result()
        assert b.store.read_blob(honest.doc_cid) == payload
        assert [(i.doc_cid, i.pinned, i.complete) for i in b.store.list()] == [(honest.doc_cid, True, True)]


@pytest.mark.anyio
async def test_a_private_blob_is_not_there_for_peers_until_it_is_shared(tmp_path: Path) -> None:
    secret, shared = b"my diary " * 3000, b"the garden plan " * 3000
    async with nodes(tmp_path, ["owner", "peer"]) as n:
        owner, peer = n["owner"], n["peer"]
        for name, data in (("diary.txt", secret), ("garden.txt", shared)):
            (tmp_path / name).write_bytes(data)
        diary = await owner.bus.call(
            "file.import", input={"path": str(tmp_path / "diary.txt"), "private": True}
        )
        await owner.bus.call("file.import", input={"path": str(tmp_path / "garden.txt")})
        cid = diary.output["doc_cid"]
        chunk = owner.store.get_manifest(cid).chunks[0]
        listed = (await peer.bus.call("file.list", provider=owner.id)).output["blobs"]
        assert [b["doc_cid"] for b in listed] == [blob_cid(shared)]
        for refused in ({"doc_cid": cid}, {"chunk_id": chunk}):
            with pytest.raises(NotFound):
                await peer.bus.call("file.read", input=refused, provider=owner.id)
        mine = (await owner.bus.call("file.list")).output["blobs"]
        assert {b["doc_cid"]: b["private"] for b in mine} == {cid: True, blob_cid(shared): False}
        with pytest.raises(BadRequest):
            await owner.bus.call("file.import", input={"path": str(tmp_path / "diary.txt"), "pin": "false"})
        # Imported again without `private` (e.g. `hearthnet file put`): shared from now on.
        await owner.bus.call("file.import", input={"path": str(tmp_path / "diary.txt")})
        read = await peer.bus.call("file.read", input={"chunk_id": chunk}, provider=owner.id)
        assert read.output["chunk_id"] == chunk


@pytest.mark.anyio
async def test_paths_that_cannot_work_are_bad_requests_and_a_long_name_exports(tmp_path: Path) -> None:
    async with nodes(tmp_path, ["a", "b"]) as n:
        bus = n["a"].bus
        src = tmp_path / "notes.txt"
        src.write_bytes(b"notes " * 1000)
        loop = tmp_path / "loop"
        os.symlink(loop, loop)
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        for path in (
            "notes.txt",
            str(loop),
            str(fifo),
            str(tmp_path),
            str(tmp_path / "x\x00y"),
            "/" + "n" * 300,
        ):
            with pytest.raises(BadRequest):
                await bus.call("file.import", input={"path": path})
        cid = (await bus.call("file.import", input={"path": str(src)})).output["doc_cid"]
        for dest in ("out.txt", str(tmp_path / ("n" * 300)), str(loop / "x"), str(tmp_path / "x\x00y")):
            with pytest.raises(BadRequest):
                await bus.call("file.export", input={"doc_cid": cid, "path": dest})
        longest = tmp_path / ("n" * 250)  # its temporary name used to be too long for the file system
        await bus.call("file.export", input={"doc_cid": cid, "path": str(longest)})
        assert longest.read_bytes() == src.read_bytes()
        assert [name for name in os.listdir(tmp_path) if name.endswith(".part")] == []


# -- defect: `file get --out` wrote through symlinks, over read-only files, FIFOs and devices -------
def part_files(top: Path) -> list[str]:
    """Temporary ``.part`` files an export left anywhere under ``top``."""
    return [name for _, _, names in os.walk(top) for name in names if name.endswith(".part")]


def _special_destinations(tmp: Path) -> dict[str, tuple[Path, str]]:
    """Destinations no export may touch, with the words of their refusal."""
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"the user's own file")
    out = tmp / "out"
    out.mkdir()
    os.symlink(outside / "secret.txt", out / "link")
    os.symlink("/dev/null", out / "null-link")
    os.mkfifo(out / "fifo")
    return {
        "link": (out / "link", "symbolic link"),
        "null-link": (out / "null-link", "symbolic link"),
        "fifo": (out / "fifo", "FIFO"),
        "dir": (outside, "directory"),
    }


@pytest.mark.anyio
async def test_export_never_writes_through_a_link_nor_into_anything_but_a_regular_file(
    tmp_path: Path,
) -> None:
    async with nodes(tmp_path, ["a", "b"]) as n:
        bus = n["a"].bus
        src = tmp_path / "report.txt"
        src.write_bytes(b"the exported report " * 500)
        cid = (await bus.call("file.import", input={"path": str(src)})).output["doc_cid"]
        for name, (dest, words) in _special_destinations(tmp_path).items():
            before = os.lstat(dest)
            for force in (False, True):
                with pytest.raises(BadRequest, match=words) as info:
                    await bus.call("file.export", input={"doc_cid": cid, "path": str(dest), "force": force})
                assert str(dest) in info.value.message, name
                after = os.lstat(dest)
                assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino), name
        assert (tmp_path / "outside" / "secret.txt").read_bytes() == b"the user's own file"
        with pytest.raises(BadRequest, match="names a directory"):
            await bus.call("file.export", input={"doc_cid": cid, "path": str(tmp_path / "new-dir") + "/"})
        with pytest.raises(BadRequest, match="force must be true or false"):
            await bus.call("file.export", input={"doc_cid": cid, "path": str(tmp_path / "x"), "force": "yes"})
        assert not (tmp_path / "new-dir").exists() and not (tmp_path / "x").exists()
        assert part_files(tmp_path) == []


@pytest.mark.anyio
async def test_export_over_a_device_node_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    device = tmp_path / "null-device"
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # the null device: harmless if written
    async with nodes(tmp_path, ["a", "b"]) as n:
        bus = n["a"].bus
        cid = (await bus.call("file.import", input={"path": str(Path(file_service.__file__))})).output[
            "doc_cid"
        ]
        for force in (False, True):
            with pytest.raises(BadRequest, match="character device"):
                await bus.call("file.export", input={"doc_cid": cid, "path": str(device), "force": force})
        assert stat.S_ISCHR(os.lstat(device).st_mode)


@pytest.mark.anyio
async def test_export_replaces_an_existing_file_only_when_forced_and_keeps_its_mode(tmp_path: Path) -> None:
    async with nodes(tmp_path, ["a", "b"]) as n:
        bus = n["a"].bus
        src = tmp_path / "new.txt"
        src.write_bytes(b"the new version " * 800)
        cid = (await bus.call("file.import", input={"path": str(src)})).output["doc_cid"]
        dest = tmp_path / "kept.txt"
        dest.write_bytes(b"the old version")
        dest.chmod(0o444)
        with pytest.raises(BadRequest, match="already exists"):
            await bus.call("file.export", input={"doc_cid": cid, "path": str(dest)})
        assert dest.read_bytes() == b"the old version"
        assert stat.S_IMODE(dest.stat().st_mode) == 0o444
        await bus.call("file.export", input={"doc_cid": cid, "path": str(dest), "force": True})
        assert dest.read_bytes() == src.read_bytes()
        assert stat.S_IMODE(dest.stat().st_mode) == 0o444  # replaced, still as protected as it was
        assert part_files(tmp_path) == []


@pytest.mark.anyio
async def test_export_leaves_alone_what_appears_at_the_destination_while_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another program creates the file (or swaps a forced destination for a link) meanwhile."""
    async with nodes(tmp_path, ["a", "b"]) as n:
        a = n["a"]
        src = tmp_path / "big.txt"
        src.write_bytes(os.urandom(8 * SMALL))
        cid = (await a.bus.call("file.import", input={"path": str(src)})).output["doc_cid"]
        verified = a.store._iter_verified
        meanwhile: list[Callable[[], None]] = []

        def iterate_then_meddle(manifest: Manifest) -> Iterator[bytes]:
            for i, data in enumerate(verified(manifest)):
                if i == 2:
                    meanwhile.pop()()
                yield data

        monkeypatch.setattr(a.store, "_iter_verified", iterate_then_meddle)
        theirs = tmp_path / "theirs.txt"
        meanwhile.append(lambda: theirs.write_bytes(b"written by another program"))
        with pytest.raises(BadRequest, match="appeared while"):
            await a.bus.call("file.export", input={"doc_cid": cid, "path": str(theirs)})
        assert theirs.read_bytes() == b"written by another program"

        outside = tmp_path / "outside.txt"
        outside.write_bytes(b"not to be touched")
        swapped = tmp_path / "swapped.txt"
        swapped.write_bytes(b"old")

        def swap_for_a_link() -> None:
            swapped.unlink()
            swapped.symlink_to(outside)

        meanwhile.append(swap_for_a_link)
        with pytest.raises(BadRequest, match="changed while"):
            await a.bus.call("file.export", input={"doc_cid": cid, "path": str(swapped), "force": True})
        assert swapped.is_symlink() and outside.read_bytes() == b"not to be touched"
        assert part_files(tmp_path) == []


# -- defect: a refused `file put --on` kept the imported blob pinned here --------------------------
@pytest.mark.anyio
async def test_a_refused_push_of_an_import_keeps_nothing_it_created(tmp_path: Path) -> None:
    async with nodes(tmp_path, ["member", "host"], members=frozenset({"member"})) as n:
        member, host = n["member"], n["host"]
        new = tmp_path / "new.txt"
        new.write_bytes(b"never stored before " * 300)
        mine = tmp_path / "mine.txt"
        mine.write_bytes(b"already pinned here " * 300)
        kept = (await member.bus.call("file.import", input={"path": str(mine)})).output["doc_cid"]
        for path in (new, mine):
            for target in (host.id, "ed25519:" + "A" * 43):  # refused; no such node
                with pytest.raises((Unauthorized, NotFound, Partition)):
                    async with member.bus.stream(
                        "file.push", input={"path": str(path), "node": target}
                    ) as call:
                        await call.result()
        assert [(i.doc_cid, i.pinned, i.complete) for i in member.store.list()] == [(kept, True, True)]
        assert list(member.store.iter_blob(kept)) != []
        assert host.store.list() == []
        # The same flow to a node that accepts it: pinned here and there.
        async with host.bus.stream("file.push", input={"path": str(new), "node": member.id}) as call:
            result = (await call.result()).output
        cid = result["imported"]["doc_cid"]
        assert result["doc_cid"] == cid and result["imported"]["size"] == new.stat().st_size
        assert [(i.doc_cid, i.pinned) for i in host.store.list()] == [(cid, True)]
        assert member.store.read_blob(cid) == new.read_bytes()


@pytest.mark.anyio
async def test_many_files_import_in_one_call_each_answered_in_order(tmp_path: Path) -> None:
    async with nodes(tmp_path, ["a"]) as n:
        a = n["a"]
        for name in ("one.txt", "two.txt"):
            (tmp_path / name).write_text(f"the text of {name}", encoding="utf-8")
        paths = [str(tmp_path / "one.txt"), str(tmp_path / "missing.txt"), str(tmp_path / "two.txt")]
        got = (await a.bus.call("file.import", input={"paths": paths, "pin": False})).output["files"]
        assert [f["path"] for f in got] == paths
        assert got[1]["error"] == "bad_request" and "missing.txt" in got[1]["message"]
        for f, name in ((got[0], "one.txt"), (got[2], "two.txt")):
            assert f["doc_cid"] == blob_cid(f"the text of {name}".encode())
            assert a.store.read_blob(f["doc_cid"]) == f"the text of {name}".encode()
        for bad in ({"paths": []}, {"paths": ["relative.txt"]}, {"paths": paths, "path": paths[0]}):
            with pytest.raises(BadRequest):
                await a.bus.call("file.import", input=bad)
