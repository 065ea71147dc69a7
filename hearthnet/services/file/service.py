"""``file.put``, ``file.read``, ``file.list`` between nodes, and local helpers for the CLI.

Remote capabilities (stream frames as in ARCHITECTURE.md):

- ``file.put@1.0`` (trusted, streamed): the caller offers ``input {manifest}``;
  the receiver answers one frame ``{need: [chunk ids]}``; the caller sends
  input frames ``{chunk_id, data}`` for exactly those and ends its input; the
  receiver verifies every chunk, checks the whole document against its CID and
  answers ``done {doc_cid, size, chunks_received, chunks_total}``.  A put that
  was interrupted resumes by sending only what is still missing.
- ``file.read@1.0`` (member, streamed): ``{chunk_id}`` -> the chunk in
  ``output``; or ``{doc_cid, skip?}`` -> a ``{manifest}`` frame, then one
  ``{index, chunk_id, data}`` frame per chunk in order.
- ``file.list@1.0`` (member): ``{prefix?, after?}`` -> ``{blobs: [...], truncated}``; the
  answer stops at ``LIST_BUDGET`` encoded bytes, ``after`` (the last cid seen) continues it.

Local only (the CLI through the control socket, other services through the bus):
``file.import {path}``, ``file.push {doc_cid, node}`` (or ``{path, node}``: import, push,
keep nothing if the push fails), ``file.fetch {doc_cid, hint?}``,
``file.export {doc_cid, path, force?}`` (never through a link, into a special file, or over
a file unless forced: ``hearthnet.blobs.destination``).

Memory stays bounded by the flow-control window: at most a few chunks of any
blob are in memory at once, whatever its size.  Transfers of one blob into this
node take turns.  A background thread collects garbage (``BlobStore.gc``) at
start and every ``GC_INTERVAL_S``.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import structlog

from hearthnet.blobs import BlobStore, Manifest, ReassemblyCheck
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.contracts.levels import trust_required
from hearthnet.errors import BadRequest, NotFound, unwrap_group
from hearthnet.services.file.inputs import check_length, cid_input
from hearthnet.services.file.local import LocalFiles
from hearthnet.wire.codec import pack

log = structlog.get_logger("hearthnet.file")

_IO_THREADS = 6
WRITE_QUEUE = 4
"""Received chunks waiting for a writer thread of one put (beyond the flow-control window)."""
READ_AHEAD = 3
"""Chunks a sender reads (and verifies) ahead of the one it is sending."""
WRITERS = 3
"""Chunks of one put hashed and written at once (file creation dominates: ``specs/blobs.md``)."""
LIST_BUDGET: Final = 512 * 1024
"""Encoded bytes of ``blobs`` entries in one ``file.list`` answer (half the default 1 MiB frame)."""
_LIST_PAGE: Final = 1024
GC_INTERVAL_S: Final = 600.0
"""Seconds between garbage collections of the blob store (stale leftovers, then the cap)."""


class FileService(LocalFiles):
    name = "file"

    def __init__(
        self,
        *,
        bus: BusAPI,
        store: BlobStore,
        timeout_seconds: float = 600.0,
        gc_interval_s: float = GC_INTERVAL_S,
    ) -> None:
        self._bus = bus
        self.store = store
        self._limiter = anyio.CapacityLimiter(_IO_THREADS)
        self._timeout = timeout_seconds
        self.chunks_received = 0
        self.chunks_served = 0
        self.gc_runs = 0
        """Completed garbage collections of the blob store."""
        self._transfer_locks: dict[str, anyio.Lock] = {}
        self._transfer_waiters: dict[str, int] = {}
        self._gc_interval = gc_interval_s
        self._gc_stop = threading.Event()
        self._gc_thread: threading.Thread | None = None

    async def _io(self, fn: Any, *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # Service protocol ------------------------------------------------------------
    def registrations(self) -> list[Registration]:
        t = self._timeout
        return [
            Registration(
                CapabilityDescriptor(
                    "file.put",
                    (1, 0),
                    trust_required=trust_required("file.put"),
                    max_concurrent=4,
                    timeout_seconds=t,
                    idempotent=True,
                    streaming=True,
                ),
                self._handle_put,
            ),
            Registration(
                CapabilityDescriptor(
                    "file.read", (1, 0), max_concurrent=8, timeout_seconds=t, idempotent=True, streaming=True
                ),
                self._handle_read,
            ),
            Registration(
                CapabilityDescriptor(
                    "file.list", (1, 0), max_concurrent=8, timeout_seconds=10.0, idempotent=True
                ),
                self._handle_list,
            ),
            Registration(
                CapabilityDescriptor(
                    "file.import",
                    (1, 0),
                    trust_required=trust_required("file.import"),
                    timeout_seconds=t,
                    local_only=True,
                ),
                self._handle_import,
            ),
            Registration(
                CapabilityDescriptor(
                    "file.push",
                    (1, 0),
                    trust_required=trust_required("file.push"),
                    timeout_seconds=t,
                    local_only=True,
                    streaming=True,
                ),
                self._handle_push,
            ),
            Registration(
                CapabilityDescriptor(
                    "file.fetch", (1, 0), timeout_seconds=t, local_only=True, streaming=True, max_concurrent=4
                ),
                self._handle_fetch,
            ),
            Registration(
                CapabilityDescriptor("file.export", (1, 0), timeout_seconds=t, local_only=True),
                self._handle_export,
            ),
        ]

    async def start(self) -> None:
        """Start the collector: what the last run left behind at once, then every ``gc_interval_s``."""
        self._gc_thread = threading.Thread(target=self._gc_loop, name="blob-gc", daemon=True)
        self._gc_thread.start()

    async def stop(self) -> None:
        self._gc_stop.set()
        if self._gc_thread is not None:
            await anyio.to_thread.run_sync(self._gc_thread.join)
        await anyio.to_thread.run_sync(self.store.close)

    def health(self) -> dict[str, Any]:
        return {
            "chunks_received": self.chunks_received,
            "chunks_served": self.chunks_served,
            "gc_runs": self.gc_runs,
        }

    def _gc_loop(self) -> None:
        """The collector thread: off the event loop; ``gc`` holds the store lock a batch at a time."""
        while True:
            self._collect_garbage()
            if self._gc_stop.wait(self._gc_interval):
                return

    def _collect_garbage(self) -> None:
        try:
            removed = self.store.gc()
        except Exception:
            log.exception("blob_gc_failed")
            return
        self.gc_runs += 1
        if removed:
            log.info("blob_gc", removed=len(removed))

    # file.put ------------------------------------------------------------------------
    async def _handle_put(self, ctx: CallContext) -> dict[str, Any]:
        manifest = Manifest.from_wire(ctx.input.get("manifest"))
        pin = ctx.input.get("pin", False)
        if not isinstance(pin, bool):
            raise BadRequest("input.pin must be true or false")
        async with self._one_transfer_per_blob(manifest.doc_cid):
            try:
                return await self._put(ctx, manifest, pin)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._io(self.store.release_reservation, manifest.doc_cid)

    async def _put(self, ctx: CallContext, manifest: Manifest, pin: bool) -> dict[str, Any]:
        if await self._io(self.store.check_held, manifest.doc_cid):
            if pin:
                await self._io(self.store.pin, manifest.doc_cid)
            await ctx.send({"need": []})
            await _drain(ctx)
            return {
                "doc_cid": manifest.doc_cid,
                "size": manifest.size,
                "chunks_received": 0,
                "chunks_total": len(manifest.chunks),
            }
        # Refuses a blob that cannot fit and reserves its missing chunks until the put ends
        # (room is made as they arrive); replaces an incomplete manifest another transfer left.
        # (a pin is applied once the blob is complete: a made-up manifest must not stay pinned)
        await self._io(lambda: self.store.put_manifest(manifest, reserve=True))
        missing_before: list[str] = await self._io(self.store.missing_chunks, manifest)
        need = set(missing_before)
        # A fresh put streams every chunk in order: hash the document on the way
        # so that completing it need not read everything back from disk.
        reassembly = ReassemblyCheck(manifest) if missing_before == list(manifest.chunks) else None
        await ctx.send({"need": missing_before})
        received = 0
        async with self._chunk_writer() as write:
            while True:
                frame = await ctx.receive()
                if frame is None:
                    break
                chunk_id, data = frame.get("chunk_id"), frame.get("data")
                if not isinstance(chunk_id, str) or not isinstance(data, bytes):
                    raise BadRequest("a put frame is {chunk_id, data}")
                if chunk_id not in need:
                    raise BadRequest(f"chunk {chunk_id} was not asked for")
                check_length(manifest, chunk_id, data)
                need.discard(chunk_id)
                if reassembly is not None:
                    reassembly.feed(chunk_id, data)
                await write(chunk_id, data)
                received += 1
        if need:
            raise BadRequest(
                f"put ended with {len(need)} chunks still missing; call file.put again to resume"
            )
        await self._io(
            lambda: self.store.complete(manifest.doc_cid, manifest=manifest, reassembly=reassembly)
        )
        if pin:
            await self._io(self.store.pin, manifest.doc_cid)
        log.info(
            "blob_put",
            doc_cid=manifest.doc_cid,
            size=manifest.size,
            chunks_received=received,
            caller=ctx.caller,
        )
        return {
            "doc_cid": manifest.doc_cid,
            "size": manifest.size,
            "chunks_received": received,
            "chunks_total": len(manifest.chunks),
        }

    @asynccontextmanager
    async def _chunk_writer(self) -> AsyncIterator[Callable[[str, bytes], Awaitable[None]]]:
        """``write(chunk_id, data)`` for one incoming blob; everything written is durable on exit.

        ``WRITERS`` writer tasks take chunks from a queue and feed
        :class:`~hearthnet.blobs.incoming.IncomingChunks` in worker threads while
        the next chunks arrive; ``WRITE_QUEUE``, ``WRITERS`` and the flow-control
        window bound how many chunks are in memory.  However the stream ends
        (done, a bad chunk, the caller walking away), the chunks accepted so far
        are committed, so a resumed put skips them.
        """
        incoming = self.store.incoming()
        send, receive = anyio.create_memory_object_stream[tuple[str, bytes]](WRITE_QUEUE)

        async def writer(chunks: anyio.abc.ObjectReceiveStream[tuple[str, bytes]]) -> None:
            async with chunks:
                async for chunk_id, data in chunks:
                    await self._io(incoming.add, chunk_id, data)
                    self.chunks_received += 1

        finished = False
        try:
            async with anyio.create_task_group() as tg:
                async with receive:
                    for _ in range(WRITERS):
                        tg.start_soon(writer, receive.clone())
                async with send:

                    async def write(chunk_id: str, data: bytes) -> None:
                        await send.send((chunk_id, data))

                    yield write
            finished = True
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None  # e.g. a chunk that does not match its id: bad_request
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self._io(incoming.commit)
                except Exception:
                    if finished:
                        raise
                    log.warning("blob_commit_failed", exc_info=True)  # the first failure propagates
                finally:
                    incoming.close()

    @asynccontextmanager
    async def _one_transfer_per_blob(self, doc_cid: str) -> AsyncIterator[None]:
        """Puts and fetches of one blob take turns, so each sees what its predecessor committed."""
        lock = self._transfer_locks.setdefault(doc_cid, anyio.Lock())
        self._transfer_waiters[doc_cid] = self._transfer_waiters.get(doc_cid, 0) + 1
        try:
            async with lock:
                yield
        finally:
            self._transfer_waiters[doc_cid] -= 1
            if not self._transfer_waiters[doc_cid]:
                del self._transfer_waiters[doc_cid]
                del self._transfer_locks[doc_cid]

    async def _handle_read(self, ctx: CallContext) -> dict[str, Any]:
        if "chunk_id" in ctx.input:
            chunk_id = cid_input(ctx.input, "chunk_id")
            if not ctx.is_local and await self._io(self.store.chunk_is_private, chunk_id):
                raise NotFound(f"this node does not hold chunk {chunk_id}")  # as if it were not here
            data = await self._io(self.store.get_chunk, chunk_id)
            self.chunks_served += 1
            return {"chunk_id": chunk_id, "data": data}
        doc_cid = cid_input(ctx.input, "doc_cid")
        skip_raw = ctx.input.get("skip", [])
        if not isinstance(skip_raw, list):
            raise BadRequest("input.skip must be a list of chunk ids")
        skip = {s for s in skip_raw if isinstance(s, str)}

        def readable() -> bool:  # one trip to a thread for both questions
            return self.store.has_blob(doc_cid) and (ctx.is_local or not self.store.is_private(doc_cid))

        if not await self._io(readable):
            raise NotFound(f"this node does not hold {doc_cid}")  # a private blob: as if it were not here
        manifest: Manifest = await self._io(self.store.get_manifest, doc_cid)
        await ctx.send({"manifest": manifest.to_wire()})
        sent = 0
        wanted = [(i, c) for i, c in enumerate(manifest.chunks) if c not in skip]
        async with self._read_ahead(doc_cid, [c for _, c in wanted]) as chunks:
            for (index, chunk_id), data in zip(wanted, chunks, strict=True):
                await ctx.send({"index": index, "chunk_id": chunk_id, "data": await data})
                sent += 1
                self.chunks_served += 1
        return {"doc_cid": doc_cid, "size": manifest.size, "chunks_sent": sent}

    @asynccontextmanager
    async def _read_ahead(
        self, doc_cid: str, chunk_ids: list[str]
    ) -> AsyncIterator[Iterator[Awaitable[bytes]]]:
        """The verified chunks of ``doc_cid`` in order, read ``READ_AHEAD`` ahead of the sender.

        Yields one awaitable per chunk id; reading overlaps with sending, and
        memory holds at most ``READ_AHEAD`` chunks beyond the one being sent.
        """
        await self._io(self.store.touch, doc_cid)
        send, receive = anyio.create_memory_object_stream[bytes](READ_AHEAD)

        async def reader() -> None:
            async with send:
                for chunk_id in chunk_ids:
                    await send.send(await self._io(lambda c=chunk_id: self.store.get_chunk(c, touch=False)))

        async def next_chunk() -> bytes:
            return await receive.receive()

        try:
            async with anyio.create_task_group() as tg, receive:
                tg.start_soon(reader)
                yield (next_chunk() for _ in chunk_ids)
                tg.cancel_scope.cancel()  # the consumer stopped early: stop reading
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None  # e.g. a chunk that failed its hash here

    async def _handle_list(self, ctx: CallContext) -> dict[str, Any]:
        prefix = ctx.input.get("prefix", "")
        after = ctx.input.get("after", "")
        if not isinstance(prefix, str) or not isinstance(after, str):
            raise BadRequest("input.prefix and input.after must be strings")
        blobs, truncated = await self._io(self._list_page, prefix, after, ctx.is_local)
        return {"blobs": blobs, "truncated": truncated}

    def _list_page(self, prefix: str, after: str, local: bool) -> tuple[list[dict[str, Any]], bool]:
        """Entries after ``after`` up to ``LIST_BUDGET`` encoded bytes, and whether more remain.

        A peer never sees a private blob; this node's own caller sees it marked.
        """
        out: list[dict[str, Any]] = []
        used = 0
        while True:
            infos = self.store.list(prefix, after=after, limit=_LIST_PAGE, include_private=local)
            for info in infos:
                entry = {
                    "doc_cid": info.doc_cid,
                    "size": info.size,
                    "pinned": info.pinned,
                    "complete": info.complete,
                }
                if local:
                    entry["private"] = info.private
                used += len(pack(entry))
                if used > LIST_BUDGET:
                    return out, True
                out.append(entry)
            if len(infos) < _LIST_PAGE:
                return out, False
            after = infos[-1].doc_cid


async def _drain(ctx: CallContext) -> None:
    while await ctx.receive() is not None:
        pass
