"""The ``rag.watch`` contract: folders this node keeps indexed in a corpus, and
:class:`FolderClient`, the typed client the CLI and the web UI's Library use.

``rag.watch@1.0`` (this node only; the node must be ``trusted``: what it ingests is announced
under its signature) ``input {action: "add", path, corpus}`` starts watching a folder,
``{action: "remove", path}`` stops (its documents stay in the corpus), ``{action: "list"}`` ->
``{folders: [{path, corpus, from_config, state, reason?, scan {current, total}?, files, indexed,
pending, failed: [{path, reason}], last_change}]}``.  See ``specs/folders.md``.
"""

from __future__ import annotations

from typing import Any

from hearthnet.contracts.base import Caller

__all__ = ["ACTIONS", "MAX_FAILED_SHOWN", "SOURCE_PATH", "WATCH", "FolderClient"]

WATCH = "rag.watch"
ACTIONS = ("add", "remove", "list")
SOURCE_PATH = "source_path"
"""The document metadata key that holds the path of the file a watched folder ingested."""
MAX_FAILED_SHOWN = 100
"""Failed files ``list`` names per folder (their count is always complete)."""


class FolderClient:
    """``rag.watch`` as a caller uses it."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def add(self, path: str, corpus: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Watch ``path`` (a folder on the node's disk) into ``corpus``."""
        inp = {"action": "add", "path": path, "corpus": corpus}
        return (await self._caller.call(WATCH, input=inp, timeout=timeout)).output

    async def remove(self, path: str, *, timeout: float | None = None) -> dict[str, Any]:
        """Stop watching ``path``; its documents stay in their corpus."""
        inp = {"action": "remove", "path": path}
        return (await self._caller.call(WATCH, input=inp, timeout=timeout)).output

    async def list(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every watched folder with its counts (indexed, pending, failed with reasons)."""
        result = await self._caller.call(WATCH, input={"action": "list"}, timeout=timeout)
        return list(result.output.get("folders") or [])
