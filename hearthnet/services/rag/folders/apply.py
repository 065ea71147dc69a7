"""A watched folder's changes carried to its corpus, wherever the corpus is hosted, through the
bus like any caller: ``file.import`` then ``rag.ingest`` (a changed file's new version with
``replaces``: one store swap), ``rag.delete`` for a file gone, and the held documents
(``rag.list_documents``) for the reconcile after a restart.

Every call answers per file: ``ok``, or the error's code and message and whether it is
``transient`` (the host busy, away or slow: the file stays pending and is tried again) or final
(the file is refused: it stays failed, with the reason, until it changes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from hearthnet.contracts.base import Caller
from hearthnet.contracts.file import FileClient
from hearthnet.contracts.folders import SOURCE_PATH
from hearthnet.contracts.rag import MAX_LIST_PAGE, RagClient, ingest_input, ingest_timeout, is_private
from hearthnet.contracts.retries import while_busy
from hearthnet.errors import BusError, NotFound
from hearthnet.services.rag.folders.state import Stat

__all__ = ["BUSY_SECONDS", "TRANSIENT", "CorpusWriter", "Outcome", "ToIngest"]

log = structlog.get_logger("hearthnet.rag.folders")

TRANSIENT = frozenset({"capacity_exceeded", "timeout", "partition", "rate_limited", "internal_error"})
"""Codes that say nothing of the file: the call is tried again later."""
BUSY_SECONDS = 120.0
"""How long one call refused with ``capacity_exceeded`` (with a retry hint) is tried again."""
MAX_SOURCE_PATH = 1000
T = TypeVar("T")


@dataclass(frozen=True)
class ToIngest:
    rel: str
    path: Path
    doc_cid: str
    stat: Stat
    replaces: str | None = None
    """The ``doc_cid`` of the file's previous version, taken out in the same store swap."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    error: str | None = None
    message: str | None = None

    @property
    def transient(self) -> bool:
        return not self.ok and self.error in TRANSIENT

    @classmethod
    def of(cls, exc: BusError) -> Outcome:
        return cls(False, exc.code, exc.message)


def source_metadata(path: Path) -> dict[str, Any]:
    """The document metadata that names its file (left out for a path too long to keep)."""
    text = str(path)
    return {SOURCE_PATH: text} if len(text) <= MAX_SOURCE_PATH else {}


class CorpusWriter:
    """One folder's corpus, as the watcher writes to it."""

    def __init__(self, caller: Caller, corpus: str) -> None:
        self.corpus = corpus
        self._rag = RagClient(caller)
        self._files = FileClient(caller)

    async def _host(self) -> str | None:
        """The node hosting the corpus (``None``: none known yet, the bus finds one that takes it)."""
        hosts = await self._rag.hosts_of(self.corpus)
        online = [h for h in hosts if h.get("online", True)]
        return str((online or hosts)[0]["node"]) if hosts else None

    async def held(self) -> set[str] | None:
        """Every ``doc_cid`` the corpus holds now (``None``: it cannot be asked now).

        A corpus no node is known to host yet (gossip not arrived after a restart, its host never
        seen) is not asked: "holds nothing" from whichever node answered would have every indexed
        file ingested again, into a second copy elsewhere."""
        out: set[str] = set()
        after: str | None = None
        try:
            host = await self._host()
            if host is None:
                return None
            while True:
                page = await self._rag.list_documents(
                    self.corpus, after=after, limit=MAX_LIST_PAGE, provider=host
                )
                out.update(str(d["doc_cid"]) for d in page.output.get("documents", []))
                after = page.output.get("next")
                if not after:
                    return out
        except NotFound:
            return out  # no such corpus yet: it holds nothing
        except BusError as exc:
            log.info("folder_held_unknown", corpus=self.corpus, code=exc.code)
            return None

    async def ingest(self, items: Sequence[ToIngest]) -> list[Outcome]:
        """Import then ingest ``items`` (one ``rag.ingest`` for them all, each answered alone)."""
        try:
            imported = await self._busy(
                lambda: self._files.import_files(
                    [str(i.path) for i in items], pin=False, private=is_private(self.corpus)
                )
            )
        except BusError as exc:
            return [Outcome.of(exc)] * len(items)
        outcomes: list[Outcome | None] = []
        inputs = []
        for item, got in zip(items, imported, strict=True):
            if "error" in got:
                outcomes.append(Outcome(False, str(got["error"]), str(got["message"])))
            elif got["doc_cid"] != item.doc_cid:  # written to since it was hashed: not stable yet
                outcomes.append(Outcome(False, "timeout", "the file changed while it was read"))
            else:
                outcomes.append(None)
                inp = ingest_input(item.doc_cid, filename=item.path.name, metadata=source_metadata(item.path))
                if item.replaces is not None:
                    inp["replaces"] = item.replaces
                inputs.append(inp)
        if inputs:
            answers = await self._ingest_inputs(inputs, sum(i.stat.size for i in items))
            it = iter(answers)
            outcomes = [next(it) if o is None else o for o in outcomes]
        return [o for o in outcomes if o is not None]

    async def _ingest_inputs(self, inputs: list[dict[str, Any]], size: int) -> list[Outcome]:
        try:
            host = await self._host()
            result = await self._busy(
                lambda: self._rag.ingest(self.corpus, inputs, provider=host, timeout=ingest_timeout(size))
            )
        except BusError as exc:
            return [Outcome.of(exc)] * len(inputs)
        if len(inputs) == 1:
            return [Outcome(True)]
        answered = {str(d["doc_cid"]): d for d in result.output["documents"]}
        out = []
        for inp in inputs:
            got = answered.get(str(inp["doc_cid"]))
            if got is None:
                out.append(Outcome(False, "internal_error", "the host did not answer for this file"))
            elif got["ok"]:
                out.append(Outcome(True))
            else:
                out.append(Outcome(False, str(got["error"]), str(got["message"])))
        return out

    async def delete(self, doc_cid: str) -> Outcome:
        """The document out of the corpus (a signed ``rag.document.deleted``; replicas follow)."""
        try:
            host = await self._host()
            await self._busy(lambda: self._rag.delete(self.corpus, doc_cid, provider=host))
        except NotFound:
            return Outcome(True)  # gone already
        except BusError as exc:
            return Outcome.of(exc)
        return Outcome(True)

    async def set_source(self, doc_cid: str, path: Path) -> Outcome:
        """A renamed or moved file's document told its new path and file name, which its citations
        name (``rag.update``: no re-embedding; a signed ``rag.document.updated``)."""
        try:
            host = await self._host()
            meta = source_metadata(path) or {SOURCE_PATH: None}
            await self._busy(
                lambda: self._rag.update(self.corpus, doc_cid, meta=meta, filename=path.name, provider=host)
            )
        except BusError as exc:
            return Outcome.of(exc)
        return Outcome(True)

    async def _busy(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call``, tried again while the node is busy (:func:`while_busy`), for ``BUSY_SECONDS``."""
        return await while_busy(call, within=BUSY_SECONDS)
