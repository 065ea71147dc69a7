"""Files into a corpus, the one way every front door does it: import → push → ingest.

The files are imported by the node the caller reaches (unpinned: the node that indexes a document
pins its own copy, so a refused file leaves nothing held; a ``personal`` document is a private
blob), pushed to the corpus's host when that is another node, and ingested there with one
``rag.ingest`` (a single file is a batch of one).  A call refused with ``capacity_exceeded`` is
tried again after :func:`~hearthnet.contracts.retries.retry_wait`, within ``busy_seconds``;
every other failure is the failing file's, never the others'.  The CLI (``hearthnet ingest``) and
the web UI's upload jobs both call :func:`ingest_files`.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hearthnet.bus.context import CallResult
from hearthnet.contracts.base import Caller, streamed_result
from hearthnet.contracts.file import FileClient
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rag import INGEST_FLOOR_SECONDS, RagClient, ingest_input, ingest_timeout, is_private
from hearthnet.contracts.retries import while_busy
from hearthnet.errors import BusError
from hearthnet.frontends.client.corpora import ingest_host

__all__ = ["INGEST_TIMEOUT", "Document", "Progress", "ingest_files"]

INGEST_TIMEOUT = INGEST_FLOOR_SECONDS
"""Seconds one ``rag.ingest`` call may take (fetch, read, embed, write)."""
BUSY_SECONDS = 600.0
"""How long a call refused with ``capacity_exceeded`` is tried again."""

Progress = Callable[[str, dict[str, Any]], None]
"""Where the flow reports each step: a label (a file's name, or "N files") and a frame
``{stage, current, total}`` (``import``, ``push``'s and ``rag.ingest``'s own stages, ``wait``)."""
T = TypeVar("T")


@dataclass(frozen=True)
class Document:
    """One file to ingest: its path on the node's disk and the name the document keeps."""

    path: str
    filename: str
    title: str | None = None


def _size(path: str) -> int:
    """A file's size in bytes (0 if it cannot be read: its import already said why)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _no_progress(label: str, frame: dict[str, Any]) -> None:
    return None


async def ingest_files(
    caller: Caller,
    corpus: str,
    documents: Sequence[Document],
    *,
    on: str | None = None,
    language: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: Progress = _no_progress,
    busy_seconds: float = BUSY_SECONDS,
) -> tuple[str, list[dict[str, Any]]]:
    """``documents`` into ``corpus`` (hosted on ``on``, else where :func:`ingest_host` says): the
    host, and an entry per document in order, ``{ok: true, doc_cid, chunks_indexed,
    tokens_indexed, event_id, node, existing, ocr_pages?, attachments?}`` or ``{ok: false, error,
    message, doc_cid?}``.  Raises only what stops every document (no host for the corpus)."""
    host = await ingest_host(caller, corpus, on)
    own = str((await NodeClient(caller).status())["node_id"])
    flow = _Flow(caller, corpus, host, documents, progress, busy_seconds)
    try:
        await flow.import_all()
        if host != own:
            await flow.push()
        await flow.ingest(language, metadata)
    except BusError as exc:  # the call as a whole failed: every document not answered yet with it
        for entry in flow.entries:
            if "ok" not in entry:
                entry.update(ok=False, error=exc.code, message=exc.message)
    return host, flow.entries


@dataclass(eq=False)
class _Flow:
    """One :func:`ingest_files` call's documents, each with its entry, step by step."""

    caller: Caller
    corpus: str
    host: str
    documents: Sequence[Document]
    progress: Progress
    busy_seconds: float
    entries: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        docs = self.documents
        self.entries = [{} for _ in docs]
        self.label = docs[0].filename if len(docs) == 1 else f"{len(docs)} files"

    def _show(self, frame: dict[str, Any]) -> None:
        self.progress(self.label, frame)

    async def import_all(self) -> None:
        """``file.import {paths}``: each document's ``doc_cid``, or its failure."""
        self._show({"stage": "import", "current": 0, "total": len(self.documents)})
        paths = [d.path for d in self.documents]
        files = FileClient(self.caller)
        private = is_private(self.corpus)
        imported = await self._retrying(lambda: files.import_files(paths, pin=False, private=private))
        for entry, got in zip(self.entries, imported, strict=True):
            if "error" in got:
                entry.update(ok=False, error=got["error"], message=got["message"])
            else:
                entry["doc_cid"] = str(got["doc_cid"])

    async def push(self) -> None:
        """Each imported document to the host; a refusal is that document's."""
        files = FileClient(self.caller)
        for doc, entry in zip(self.documents, self.entries, strict=True):
            if "ok" in entry:
                continue

            def show(frame: dict[str, Any], name: str = doc.filename) -> None:
                self.progress(name, frame)

            try:
                await streamed_result(files.pushing(self.host, doc_cid=entry["doc_cid"]), show)
            except BusError as exc:
                entry.update(ok=False, error=exc.code, message=exc.message)

    async def ingest(self, language: str | None, metadata: Mapping[str, Any] | None) -> None:
        """One ``rag.ingest`` for every document still in the running: one per content (a copy
        of a file is "already indexed"), each answered on its own."""
        first: dict[str, int] = {}
        inputs = []
        for i, (doc, entry) in enumerate(zip(self.documents, self.entries, strict=True)):
            if "ok" in entry or entry["doc_cid"] in first:
                continue
            first[entry["doc_cid"]] = i
            inputs.append(
                ingest_input(
                    entry["doc_cid"],
                    filename=doc.filename,
                    title=doc.title,
                    language=language,
                    metadata=metadata,
                )
            )
        if not inputs:
            return
        rag = RagClient(self.caller)
        timeout = ingest_timeout(sum(_size(self.documents[i].path) for i in first.values()))
        result = await self._retrying(
            lambda: rag.ingest(self.corpus, inputs, provider=self.host, timeout=timeout, on_frame=self._show)
        )
        answered = {str(d["doc_cid"]): d for d in _answers(result, len(inputs))}
        for i, entry in enumerate(self.entries):
            if "ok" in entry:
                continue
            got = answered[entry["doc_cid"]]
            if not got["ok"]:
                entry.update(ok=False, error=got["error"], message=got["message"])
                continue
            entry.update(
                ok=True,
                chunks_indexed=got["chunks_indexed"],
                tokens_indexed=got["tokens_indexed"],
                event_id=got.get("ingest_event_id"),
                node=result.provider,
                existing=bool(got["existing"]) or first[entry["doc_cid"]] != i,
            )
            if "ocr_pages" in got and not entry["existing"]:
                entry["ocr_pages"] = got["ocr_pages"]
            if "kept" in got:  # indexed already with other values: they were kept
                entry["kept"] = got["kept"]
            if got.get("attachments"):  # an e-mail's files, each a document of its own
                entry["attachments"] = got["attachments"]

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call``, tried again while the node is busy (:func:`while_busy`, a ``wait`` step
        reported each time), within ``busy_seconds``."""
        return await while_busy(call, within=self.busy_seconds, waiting=self._waiting)

    def _waiting(self) -> None:
        self._show({"stage": "wait", "current": 0, "total": 0})


def _answers(result: CallResult, sent: int) -> list[dict[str, Any]]:
    """``rag.ingest``'s answer per document: a batch's ``documents``, or one document's output
    (sent alone) in the same shape."""
    if sent > 1:
        return [dict(d) for d in result.output["documents"]]
    out, meta = result.output, result.meta
    return [
        {
            **out,
            "ok": True,
            "ingest_event_id": meta.get("ingest_event_id"),
            "existing": bool(meta.get("existing")),
        }
    ]
