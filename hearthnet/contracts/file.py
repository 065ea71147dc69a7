"""The ``file.*`` contract: content-addressed blobs between nodes, and :class:`FileClient`, what
the RAG and OCR services and the front doors fetch, import, push and read documents through.

Between nodes (member; ``file.put`` trusted): ``file.put`` streams a manifest, then the chunks
the receiver asks for; ``file.read`` streams a blob's manifest and chunks (or one chunk);
``file.list {prefix?, after?}`` answers a page of ``{blobs, truncated}``.  This node only (the
front doors, other services): ``file.import {path | paths, pin = true, private = false}``,
``file.push {doc_cid | path, node}``, ``file.fetch {doc_cid, hint?}`` (have the blob here, from
a member if need be; ``hint`` names a node likely to hold it), ``file.export {doc_cid, path,
force?}``.  Ids are ``blake3:<64 hex>`` (:mod:`hearthnet.blobs.cid`); see ``specs/file.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from hearthnet.contracts.base import Caller, Streamed, opened, streamer

__all__ = ["EXPORT", "FETCH", "IMPORT", "LIST", "PUSH", "PUT", "READ", "FileClient"]

PUT = "file.put"
READ = "file.read"
LIST = "file.list"
IMPORT = "file.import"
PUSH = "file.push"
FETCH = "file.fetch"
EXPORT = "file.export"


class FileClient:
    """The local ``file.*`` capabilities of the node ``caller`` reaches."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def fetch(
        self,
        doc_cid: str,
        *,
        hint: str | None = None,
        provider: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """``file.fetch``: the blob held by ``provider`` (this node), fetched from a member if need be."""
        inp: dict[str, Any] = {"doc_cid": doc_cid}
        if hint:
            inp["hint"] = hint
        result = await self._caller.call(FETCH, input=inp, provider=provider, timeout=timeout)
        return result.output

    def fetching(self, doc_cid: str) -> AbstractAsyncContextManager[Streamed]:
        """``file.fetch`` streamed (its progress frames), for a door that shows them."""
        return opened(streamer(self._caller), FETCH, input={"doc_cid": doc_cid})

    async def import_file(self, path: str, *, pin: bool = True, private: bool = False) -> dict[str, Any]:
        """``file.import``: the file at ``path`` (on the node's own disk) into its blob store."""
        result = await self._caller.call(IMPORT, input={"path": path, "pin": pin, "private": private})
        return result.output

    async def import_files(
        self, paths: Sequence[str], *, pin: bool = True, private: bool = False
    ) -> list[dict[str, Any]]:
        """``file.import {paths}``: several files at once; one entry each (``doc_cid``, or
        ``error`` and ``message``), in order."""
        result = await self._caller.call(IMPORT, input={"paths": list(paths), "pin": pin, "private": private})
        return list(result.output["files"])

    def pushing(
        self, node: str, *, doc_cid: str | None = None, path: str | None = None
    ) -> AbstractAsyncContextManager[Streamed]:
        """``file.push``: a held blob (``doc_cid``), or a file imported first (``path``), to ``node``."""
        inp: dict[str, Any] = {"node": node}
        if doc_cid is not None:
            inp["doc_cid"] = doc_cid
        if path is not None:
            inp["path"] = path
        return opened(streamer(self._caller), PUSH, input=inp)

    async def export(self, doc_cid: str, path: str, *, force: bool = False) -> dict[str, Any]:
        """``file.export``: a held blob written to ``path`` on the node's disk."""
        result = await self._caller.call(EXPORT, input={"doc_cid": doc_cid, "path": path, "force": force})
        return result.output

    async def list(self, *, prefix: str = "", after: str = "") -> dict[str, Any]:
        """``file.list``: one page ``{blobs, truncated}`` of the blobs whose id starts with ``prefix``."""
        inp: dict[str, Any] = {"prefix": prefix}
        if after:
            inp["after"] = after
        return (await self._caller.call(LIST, input=inp)).output

    def reading(self, doc_cid: str, *, provider: str | None = None) -> AbstractAsyncContextManager[Streamed]:
        """``file.read``: a blob's manifest, then its chunks (frames ``{manifest}`` and ``{data}``)."""
        return opened(streamer(self._caller), READ, input={"doc_cid": doc_cid}, provider=provider)
