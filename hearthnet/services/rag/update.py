"""``rag.update``: a document's title and metadata changed on its host without re-embedding, and
announced as a signed ``rag.document.updated`` that replicas follow.

The store's update is one ledger transaction, then the chunks (:mod:`.store.update`); its
announcement is owed from that transaction until the event is appended, across a kill too
(:meth:`Updates.announce_pending` at the next start).  The event carries the document's whole title
and caller metadata after the change (not the change), so whoever applies it, whenever, ends with
the same document.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.bus.context import CallContext
from hearthnet.contracts.rag import UPDATED, announced, check_writable, validate_corpus_name
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.events.envelope import MAX_EVENT_BYTES
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.announce import AppendEvent
from hearthnet.services.rag.gate import CorpusGate, DocumentLocks
from hearthnet.services.rag.inputs import IngestInput, UpdateInput, update_input
from hearthnet.services.rag.store import CorpusStore
from hearthnet.services.rag.store.update import DocumentUpdate, merged_metadata

__all__ = ["MAX_UPDATE_BYTES", "Updates"]

log = structlog.get_logger("hearthnet.rag")

MAX_UPDATE_BYTES = MAX_EVENT_BYTES // 2
"""The most a document's title and metadata may take (as JSON) for its update to be announced:
the signed event must stay within the log's limit."""

Refuse = Callable[[str], None]
"""Raises if ``corpus`` takes no writes here (an archive, a replica)."""


@dataclass
class Updates:
    """The ``rag.update`` handler of one RAG service, and the announcements a kill left owed."""

    store: CorpusStore
    node_id: str
    gate: CorpusGate
    documents: DocumentLocks
    store_limiter: anyio.CapacityLimiter
    read_threads: WorkerThreads
    append_event: AppendEvent
    check_trust: Callable[[str], Awaitable[None]]
    refuse: Refuse = lambda _corpus: None
    changed: Callable[[str], None] = lambda _corpus: None

    def hooks(self, *, refuse: Refuse, changed: Callable[[str], None]) -> None:
        """``refuse``: raises for a corpus that takes no writes here; ``changed``: told the corpus
        after a document of it changed."""
        self.refuse, self.changed = refuse, changed

    async def handle(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_writable(corpus, is_local=ctx.is_local, what="metadata changes")
        self.refuse(corpus)
        inp = update_input(ctx.input)
        announce = announced(corpus)
        if announce:
            await self.check_trust("announce metadata changes")
        async with (
            self.gate.ingest(corpus, undone="nothing was changed: update"),
            self.documents.hold(corpus, inp.doc_cid),
        ):
            done = await self._update(corpus, inp, announce)
            event_id = ""
            if done.changed:
                with anyio.CancelScope(shield=True):  # the ledger has it: so must the community
                    if announce:
                        event_id = await self._announce(corpus, done)
                    self.changed(corpus)
        ms = round((time.perf_counter() - started) * 1000, 3)
        log.info("rag_updated", corpus=corpus, doc_cid=inp.doc_cid, changed=done.changed, ms=ms)
        output = {
            "doc_cid": done.doc_cid,
            "title": done.title,
            "filename": done.filename,
            "metadata": done.metadata,
            "changed": done.changed,
        }
        return output, {"corpus": corpus, "ms": ms, "update_event_id": event_id}

    async def _update(self, corpus: str, inp: UpdateInput, announce: bool) -> DocumentUpdate:
        """The store's update (checked first: the result must fit in its event)."""
        doc_cid, fields, title = inp.doc_cid, inp.metadata, inp.title

        def update() -> DocumentUpdate | None:
            if corpus not in self.store.corpora():
                raise NotFound(f"corpus {corpus} is not held by node {self.node_id}")
            doc = self.store.document(corpus, doc_cid)
            if doc is None:
                return None
            after = [title or doc["title"], merged_metadata(doc["metadata"], fields), inp.filename]
            size = len(json.dumps(after).encode())
            if size > MAX_UPDATE_BYTES:
                raise BadRequest(
                    f"the document's title and metadata would take {size} bytes: at most "
                    f"{MAX_UPDATE_BYTES} can be announced; set fewer or shorter fields"
                )
            return self.store.updates.update_document(
                corpus, doc_cid, metadata=fields, title=title, filename=inp.filename, announce=announce
            )

        with anyio.CancelScope(shield=True):  # once started, the store's update finishes
            done: DocumentUpdate | None = await run_blocking(update, limiter=self.store_limiter)
        if done is None:
            raise NotFound(
                f"document {doc_cid} is not in corpus {corpus} on node {self.node_id} "
                f"('hearthnet docs --corpus {corpus}' lists its documents)"
            )
        return done

    async def _announce(self, corpus: str, done: DocumentUpdate) -> str:
        data = {"corpus": corpus, "doc_cid": done.doc_cid, "title": done.title, "metadata": done.metadata}
        if done.renamed and done.filename is not None:
            data["filename"] = done.filename
        event_id = await self.append_event(UPDATED, data)
        await run_blocking(
            self.store.updates.update_announced, corpus, done.doc_cid, limiter=self.store_limiter
        )
        return event_id

    async def note_kept(self, corpus: str, inputs: list[IngestInput], answers: list[dict[str, Any]]) -> None:
        """Each answer of a document that was indexed already gets ``kept``: the stored title and
        metadata fields that differ from what its ingest gave (an ingest never changes a stored
        document: ``rag.update`` does), so the caller can say so and how to change them."""
        given = {d.doc_cid: d for d in inputs}
        todo = [
            a
            for a in answers
            if a.get("existing") is not False and a.get("ok", True) and a["doc_cid"] in given
        ]

        def read() -> dict[str, dict[str, Any] | None]:
            return {str(a["doc_cid"]): self.store.document(corpus, str(a["doc_cid"])) for a in todo}

        stored = await run_blocking(read, limiter=self.read_threads) if todo else {}
        for answer in todo:
            doc, inp = stored.get(answer["doc_cid"]), given[answer["doc_cid"]]
            if doc is None:
                continue
            kept: dict[str, Any] = {}
            if inp.title and inp.title != doc["title"]:
                kept["title"] = doc["title"]
            old = doc["metadata"]
            differ = {k: old.get(k) for k, v in inp.metadata.items() if not _same(old.get(k), v)}
            if differ:
                kept["metadata"] = differ
            if kept:
                answer["kept"] = kept

    async def announce_pending(self) -> None:
        """Append the events of updates that were written but not announced (the node died between):
        with the document's title and metadata as they are now.  An append that fails keeps the
        marker for the next start; it never stops this one."""
        pending = await run_blocking(self.store.updates.pending_updates, limiter=self.store_limiter)
        for corpus, doc_cid in pending:
            try:
                doc = await run_blocking(
                    lambda c=corpus, d=doc_cid: self.store.document(c, d), limiter=self.store_limiter
                )
                if doc is not None:
                    done = DocumentUpdate(
                        doc_cid,
                        str(doc["title"]),
                        dict(doc["metadata"]),
                        changed=True,
                        filename=doc.get("filename"),
                        renamed=True,  # it may have been a rename: said again, to be sure
                    )
                    await self._announce(corpus, done)
                    log.warning("rag_update_announced_late", corpus=corpus, doc_cid=doc_cid)
                else:
                    await run_blocking(
                        self.store.updates.update_announced, corpus, doc_cid, limiter=self.store_limiter
                    )
            except BusError as exc:
                log.warning("rag_update_not_announced", corpus=corpus, doc_cid=doc_cid, code=exc.code)


def _same(a: Any, b: Any) -> bool:
    """Equal values of one kind (a boolean is not a number, ``1`` is ``1.0``)."""
    return isinstance(a, bool) == isinstance(b, bool) and isinstance(a, str) == isinstance(b, str) and a == b
