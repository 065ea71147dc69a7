"""The file capabilities of this node only (its front doors, its other services): ``file.import``
and ``file.export`` (a file of this machine into the blob store and back), ``file.push`` (a blob
to a member) and ``file.fetch`` (a blob from the members that hold it): a part of
:class:`~hearthnet.services.file.service.FileService`."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import structlog

from hearthnet.blobs import BlobStore, Manifest, ReassemblyCheck, chunk_cid
from hearthnet.blobs.destination import destination_path
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.errors import BadRequest, BusError, NotFound, ProtocolError, bus_error_in
from hearthnet.services.file.inputs import (
    SOURCE_ERRORS,
    absolute_path,
    check_length,
    cid_input,
    import_input,
    import_many_input,
    imported,
)

log = structlog.get_logger("hearthnet.file")


class LocalFiles:
    """``file.import``, ``file.export``, ``file.push``, ``file.fetch``, for :class:`FileService`."""

    if TYPE_CHECKING:  # the service's state and its transfers between nodes
        _bus: BusAPI
        store: BlobStore
        _timeout: float

        async def _io(self, fn: Any, *args: Any) -> Any: ...

        def _chunk_writer(self) -> AbstractAsyncContextManager[Callable[[str, bytes], Awaitable[None]]]: ...

        def _one_transfer_per_blob(self, doc_cid: str) -> AbstractAsyncContextManager[None]: ...

        def _read_ahead(
            self, doc_cid: str, chunk_ids: list[str]
        ) -> AbstractAsyncContextManager[Iterator[Awaitable[bytes]]]: ...

    async def _handle_import(self, ctx: CallContext) -> dict[str, Any]:
        if "paths" in ctx.input:
            return await self._import_many(ctx)
        path, pin, private = import_input(ctx.input)
        manifest, _ = await self._import(path, pin=pin, private=private)
        return imported(manifest)

    async def _import_many(self, ctx: CallContext) -> dict[str, Any]:
        """``file.import {paths}``: every file in one worker pass, each answered on its own
        (``{path, doc_cid, size, chunks}`` or ``{path, error, message}``), in order."""
        paths, pin, private = import_many_input(ctx.input)

        def import_all() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for path in paths:
                try:
                    manifest, _ = self._import_blocking(path, pin=pin, private=private)
                except BusError as exc:
                    out.append({"path": path, "error": exc.code, "message": exc.message})
                else:
                    out.append({"path": path, **imported(manifest)})
            return out

        files: list[dict[str, Any]] = await self._io(import_all)
        return {"files": files}

    async def _import(self, path: str, *, pin: bool, private: bool) -> tuple[Manifest, bool]:
        """Store the file at ``path``; its manifest and whether the blob is new here."""
        absolute_path(path)
        result: tuple[Manifest, bool] = await self._io(
            lambda: self._import_blocking(path, pin=pin, private=private)
        )
        return result

    def _import_blocking(self, path: str, *, pin: bool, private: bool) -> tuple[Manifest, bool]:
        """:meth:`_import` in the calling (worker) thread."""
        p = absolute_path(path)
        try:
            return self.store.import_file(p, pin=pin, private=private)
        except OSError as exc:
            if exc.filename != path and exc.errno not in SOURCE_ERRORS:
                raise  # the store's own disk, not the caller's file
            raise BadRequest(f"{path} cannot be read: {exc.strerror or type(exc).__name__}") from exc

    async def _handle_export(self, ctx: CallContext) -> dict[str, Any]:
        doc_cid = cid_input(ctx.input, "doc_cid")
        path = ctx.input.get("path")
        if not isinstance(path, str):
            raise BadRequest("input.path is required")
        force = ctx.input.get("force", False)
        if not isinstance(force, bool):
            raise BadRequest("input.force must be true or false")
        absolute_path(path)  # no NUL, not relative
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
        doc_cid = cid_input(ctx.input, "doc_cid")
        return await self.push(doc_cid, node, progress=ctx.send)

    async def _import_and_push(self, ctx: CallContext, node: str) -> dict[str, Any]:
        """Import a file, push it to ``node``, pin it here once the push succeeded.

        The import is unpinned until then; if the push fails (refused, the peer gone,
        cancelled) a blob the import created is taken back, while one that was here
        before, or that someone pinned meanwhile, stays.
        """
        path, pin, private = import_input(ctx.input)
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
        return {**pushed, "imported": imported(manifest)}

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
        doc_cid = cid_input(ctx.input, "doc_cid")
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
                check_length(manifest, chunk_id, data)
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
