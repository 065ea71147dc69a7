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

import errno
import functools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import structlog

from hearthnet.blobs import BlobStore, Manifest, ReassemblyCheck, chunk_cid, is_cid
from hearthnet.blobs.destination import destination_path
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest, BusError, NotFound, ProtocolError, bus_error_in, unwrap_group
from hearthnet.wire.codec import pack

log = structlog.get_logger("hearthnet.file")

_IO_THREADS = 6
WRITE_QUEUE = 4
"""Received chunks waiting for a writer thread of one put (beyond the flow-control window)."""
READ_AHEAD = 3
"""Chunks a sender reads (and verifies) ahead of the one it is sending."""
WRITERS = 3
"""Chunks of one put hashed and written at once (file creation dominates here: ~0.2-0.4 ms each)."""
LIST_BUDGET: Final = 512 * 1024
"""Encoded bytes of ``blobs`` entries in one ``file.list`` answer (half the default 1 MiB frame)."""
_LIST_PAGE: Final = 1024
GC_INTERVAL_S: Final = 600.0
"""Seconds between garbage collections of the blob store (stale leftovers, then the cap)."""


_SOURCE_ERRORS: Final = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG}
)
"""Errors of opening the file to import: the caller's path, not this node's disk."""


def _absolute_path(path: str) -> Path:
    """``path`` as given, if absolute: the node's working directory is not the caller's."""
    if "\x00" in path:
        raise BadRequest("input.path contains a NUL character")
    p = Path(path)
    if not p.is_absolute():
        raise BadRequest(f"input.path must be an absolute path, got {path!r:.200}")
    return p


def _cid_input(inp: dict[str, Any], key: str) -> str:
    value = inp.get(key)
    if not isinstance(value, str) or not is_cid(value):
        raise BadRequest(f"input.{key} must be a blake3:<hex> CID")
    return value


class FileService:
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
                    trust_required=Level.TRUSTED,
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
                CapabilityDescriptor("file.import", (1, 0), timeout_seconds=t, local_only=True),
                self._handle_import,
            ),
            Registration(
                CapabilityDescriptor("file.push", (1, 0), timeout_seconds=t, local_only=True, streaming=True),
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
                _check_length(manifest, chunk_id, data)
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
            chunk_id = _cid_input(ctx.input, "chunk_id")
            if not ctx.is_local and await self._io(self.store.chunk_is_private, chunk_id):
                raise NotFound(f"this node does not hold chunk {chunk_id}")  # as if it were not here
            data = await self._io(self.store.get_chunk, chunk_id)
            self.chunks_served += 1
            return {"chunk_id": chunk_id, "data": data}
        doc_cid = _cid_input(ctx.input, "doc_cid")
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

    # local helpers -------------------------------------------------------------------
    async def _handle_import(self, ctx: CallContext) -> dict[str, Any]:
        path, pin, private = _import_input(ctx.input)
        manifest, _ = await self._import(path, pin=pin, private=private)
        return _imported(manifest)

    async def _import(self, path: str, *, pin: bool, private: bool) -> tuple[Manifest, bool]:
        """Store the file at ``path``; its manifest and whether the blob is new here."""
        p = _absolute_path(path)
        try:
            imported: tuple[Manifest, bool] = await self._io(
                lambda: self.store.import_file(p, pin=pin, private=private)
            )
        except OSError as exc:
            if exc.filename != path and exc.errno not in _SOURCE_ERRORS:
                raise  # the store's own disk, not the caller's file
            raise BadRequest(f"{path} cannot be read: {exc.strerror or type(exc).__name__}") from exc
        return imported

    async def _handle_export(self, ctx: CallContext) -> dict[str, Any]:
        doc_cid = _cid_input(ctx.input, "doc_cid")
        path = ctx.input.get("path")
        if not isinstance(path, str):
            raise BadRequest("input.path is required")
        force = ctx.input.get("force", False)
        if not isinstance(force, bool):
            raise BadRequest("input.force must be true or false")
        _absolute_path(path)  # no NUL, not relative
        dest = destination_path(path)  # not ending in a separator
        manifest: Manifest = await self._io(lambda: self.store.export(doc_cid, dest, force=force))
        return {"doc_cid": doc_cid, "size": manifest.size, "path": path}

    async def _take_back(self, doc_cid: str) -> None:
        """Discard a blob an import created for a push that failed (the push's error is the one told)."""
        try:
            async with self._one_transfer_per_blob(doc_cid):
                if await self._io(self.store.discard, doc_cid):
                    log.info("import_taken_back", doc_cid=doc_cid)
        except Exception:
            log.warning("import_take_back_failed", doc_cid=doc_cid, exc_info=True)

    async def _handle_push(self, ctx: CallContext) -> dict[str, Any]:
        node = ctx.input.get("node")
        if not isinstance(node, str):
            raise BadRequest("input.node is required")
        if "path" in ctx.input:
            return await self._import_and_push(ctx, node)
        doc_cid = _cid_input(ctx.input, "doc_cid")
        return await self.push(doc_cid, node, progress=ctx.send)

    async def _import_and_push(self, ctx: CallContext, node: str) -> dict[str, Any]:
        """Import a file, push it to ``node``, pin it here once the push succeeded.

        The import is unpinned until then; if the push fails (refused, the peer gone,
        cancelled) a blob the import created is taken back, while one that was here
        before, or that someone pinned meanwhile, stays.
        """
        path, pin, private = _import_input(ctx.input)
        manifest, new = await self._import(path, pin=False, private=private)
        try:
            pushed = await self.push(manifest.doc_cid, node, progress=ctx.send)
        except BaseException:
            if new:
                with anyio.CancelScope(shield=True):
                    await self._take_back(manifest.doc_cid)
            raise
        if pin:
            await self._io(self.store.pin, manifest.doc_cid)
        return {**pushed, "imported": _imported(manifest)}

    async def push(self, doc_cid: str, node: str, *, progress: Any = None) -> dict[str, Any]:
        """Send a blob we hold to ``node`` (only the chunks it lacks)."""
        manifest: Manifest = await self._io(self.store.get_manifest, doc_cid)
        async with self._bus.stream(
            "file.put", (1, 0), input={"manifest": manifest.to_wire()}, provider=node, timeout=self._timeout
        ) as call:
            need: list[str] | None = None
            async for frame in call.frames():
                raw = frame.get("need")
                if not isinstance(raw, list):
                    raise ProtocolError("file.put must first answer {need}")
                need = [c for c in raw if isinstance(c, str)]
                break
            if need is None:
                return dict((await call.result()).output)
            wanted = set(need)
            order: list[tuple[int, str]] = []
            for index, chunk_id in enumerate(manifest.chunks):
                if chunk_id in wanted:
                    order.append((index, chunk_id))
                    wanted.discard(chunk_id)
            async with self._read_ahead(doc_cid, [c for _, c in order]) as chunks:
                for (index, chunk_id), data in zip(order, chunks, strict=True):
                    await call.send({"chunk_id": chunk_id, "data": await data})
                    if progress is not None:
                        await progress({"stage": "push", "current": index + 1, "total": len(manifest.chunks)})
            await call.end_input()
            result = await call.result()
        return dict(result.output)

    async def _handle_fetch(self, ctx: CallContext) -> dict[str, Any]:
        doc_cid = _cid_input(ctx.input, "doc_cid")
        hint = ctx.input.get("hint")
        return await self.fetch(doc_cid, hint if isinstance(hint, str) else None, progress=ctx.send)

    async def fetch(self, doc_cid: str, hint: str | None = None, *, progress: Any = None) -> dict[str, Any]:
        """Make ``doc_cid`` local: ask the referring peer first, then other connected members."""
        async with self._one_transfer_per_blob(doc_cid):
            try:
                return await self._fetch(doc_cid, hint, progress)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._io(self.store.release_reservation, doc_cid)

    async def _fetch(self, doc_cid: str, hint: str | None, progress: Any) -> dict[str, Any]:
        if await self._io(self.store.check_held, doc_cid):
            return {"doc_cid": doc_cid, "source": "local", "chunks_fetched": 0}
        providers = [p.node_id for p in self._bus.providers("file.read") if not p.is_local]
        order = ([hint] if hint in providers else []) + [p for p in providers if p != hint]
        if not order:
            raise NotFound(f"{doc_cid} is not here and no connected member serves file.read")
        errors: list[BusError] = []
        for node in order:
            try:
                fetched = await self._fetch_from(doc_cid, node, progress)
                return {"doc_cid": doc_cid, "source": node, "chunks_fetched": fetched}
            except BusError as exc:
                err = exc
            except BaseExceptionGroup as group:  # a peer's error seen through a task group
                found = bus_error_in(group)
                if found is None:
                    raise
                err = found
            log.info("fetch_failed", doc_cid=doc_cid, peer=node, code=err.code)
            errors.append(err)
        # Prefer a real failure (partition, corrupt data) over "that peer did not have it".
        real = [e for e in errors if not isinstance(e, NotFound)]
        raise real[-1] if real else NotFound(f"no connected member holds {doc_cid}")

    async def _fetch_from(self, doc_cid: str, node: str, progress: Any) -> int:
        have: list[str] = []
        existing = await self._io(self._known_chunks_of, doc_cid)
        if existing:
            have = existing
        fetched = 0
        manifest: Manifest | None = None
        reassembly: ReassemblyCheck | None = None
        indices_seen: set[int] = set()
        async with (
            self._chunk_writer() as write,
            self._bus.stream(
                "file.read",
                (1, 0),
                input={"doc_cid": doc_cid, "skip": have},
                provider=node,
                timeout=self._timeout,
            ) as call,
        ):
            async for frame in call.frames():
                if manifest is None:
                    manifest = Manifest.from_wire(frame.get("manifest"))
                    if manifest.doc_cid != doc_cid:
                        raise ProtocolError("peer answered with the manifest of another document")
                    # Makes room for the missing chunks (reserved until the fetch ends); replaces
                    # an incomplete manifest left behind.
                    await self._io(functools.partial(self.store.put_manifest, manifest, reserve=True))
                    if not have:  # every chunk comes, in order: hash the document on the way
                        reassembly = ReassemblyCheck(manifest)
                    continue
                chunk_id, data, index = frame.get("chunk_id"), frame.get("data"), frame.get("index")
                if not isinstance(chunk_id, str) or not isinstance(data, bytes) or not isinstance(index, int):
                    raise ProtocolError("a read frame is {index, chunk_id, data}")
                if not 0 <= index < len(manifest.chunks) or manifest.chunks[index] != chunk_id:
                    raise ProtocolError("peer sent a chunk that is not in the manifest at that index")
                if index in indices_seen:  # at most one frame per index: the transfer is bounded
                    raise ProtocolError(f"peer sent chunk {index} twice")
                indices_seen.add(index)
                _check_length(manifest, chunk_id, data)
                if chunk_cid(data) != chunk_id:
                    raise BadRequest(f"peer {node} sent a chunk that does not match its id")
                if reassembly is not None:
                    reassembly.feed(chunk_id, data)
                await write(chunk_id, data)
                fetched += 1
                if progress is not None:
                    await progress({"stage": "fetch", "current": index + 1, "total": len(manifest.chunks)})
            await call.result()
        if manifest is None:
            raise ProtocolError(f"peer {node} ended file.read without a manifest")
        used = manifest
        await self._io(lambda: self.store.complete(doc_cid, manifest=used, reassembly=reassembly))
        return fetched

    def _known_chunks_of(self, doc_cid: str) -> list[str]:
        try:
            manifest = self.store.get_manifest(doc_cid)
        except NotFound:
            return []
        missing = set(self.store.missing_chunks(manifest))
        return [c for c in manifest.chunks if c not in missing]


def _import_input(inp: dict[str, Any]) -> tuple[str, bool, bool]:
    """``path``, ``pin`` (default true) and ``private`` (default false) of an import's input."""
    path = inp.get("path")
    if not isinstance(path, str):
        raise BadRequest("input.path is required")
    pin, private = inp.get("pin", True), inp.get("private", False)
    if not isinstance(pin, bool) or not isinstance(private, bool):
        raise BadRequest("input.pin and input.private must be true or false")
    return path, pin, private


def _imported(manifest: Manifest) -> dict[str, Any]:
    return {"doc_cid": manifest.doc_cid, "size": manifest.size, "chunks": len(manifest.chunks)}


def _check_length(manifest: Manifest, chunk_id: str, data: bytes) -> None:
    """``BadRequest`` unless ``data`` has the length ``manifest`` gives the chunk ``chunk_id``."""
    expected = manifest.length_of(chunk_id)
    if len(data) != expected:
        raise BadRequest(f"chunk {chunk_id} is {len(data)} bytes; the manifest makes it {expected}")


async def _drain(ctx: CallContext) -> None:
    while await ctx.receive() is not None:
        pass
