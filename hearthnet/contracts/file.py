"""The ``file.*`` contract: content-addressed blobs between nodes, and :class:`FileClient`, what
the RAG and OCR services and the front doors fetch and import documents through.

Between nodes (member; ``file.put`` trusted): ``file.put`` streams a manifest, then the chunks
the receiver asks for; ``file.read`` streams a blob's manifest and chunks (or one chunk);
``file.list {prefix?, after?}`` answers a page of ``{blobs, truncated}``.  This node only (the
front doors, other services): ``file.import {path, pin = true, private = false}``,
``file.push {doc_cid | path, node}``, ``file.fetch {doc_cid, hint?}`` (have the blob here, from
a member if need be; ``hint`` names a node likely to hold it), ``file.export {doc_cid, path,
force?}``.  Ids are ``blake3:<64 hex>`` (:mod:`hearthnet.blobs.cid`); see ``specs/file.md``.
"""

from __future__ import annotations

from typing import Any

from hearthnet.contracts.base import Caller

__all__ = ["FileClient"]


class FileClient:
    """The local ``file.*`` capabilities of the node ``caller`` reaches."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def fetch(
        self, doc_cid: str, *, hint: str | None, provider: str | None, timeout: float
    ) -> dict[str, Any]:
        """``file.fetch``: the blob held by ``provider`` (this node), fetched from a member if need be."""
        result = await self._caller.call(
            "file.fetch", input={"doc_cid": doc_cid, "hint": hint}, provider=provider, timeout=timeout
        )
        return result.output

    async def import_file(self, path: str, *, pin: bool, private: bool) -> dict[str, Any]:
        """``file.import``: the file at ``path`` (on the node's own disk) into its blob store."""
        result = await self._caller.call("file.import", input={"path": path, "pin": pin, "private": private})
        return result.output
