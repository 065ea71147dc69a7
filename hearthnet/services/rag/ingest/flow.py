"""Documents' way into a corpus, once the input is checked and the corpus gate is held: fetch
their blobs, read and chunk them while their first chunks are already embedded (together, in
calls across documents), write them to the store in one write (each document atomic), then
announce them (the corpus registered again with its counts, the signed
``rag.document.ingested`` events, their sources pinned).  One path: a single document is a batch
of one.  A reindex takes the same read-and-embed path for every document of a corpus, then swaps
the corpus.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.blobs import BlobStore
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.contracts.embed import Embedder
from hearthnet.contracts.file import FileClient
from hearthnet.contracts.rag import INGESTED, MAX_TITLE, announced, embedded_with_another
from hearthnet.errors import BusError, NotFound
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_processes import stopped_at
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.announce import AppendEvent, AppendEvents, FindEvent
from hearthnet.services.rag.gate import Reindexing
from hearthnet.services.rag.ingest.attachments import ingest_attachments
from hearthnet.services.rag.ingest.batch import BatchRead, ReadOutcome, read_and_embed_many
from hearthnet.services.rag.ingest.document import PreparedDocument
from hearthnet.services.rag.ingest.embed import (
    Progress,
)
from hearthnet.services.rag.ingest.isolated import DocumentReaders
from hearthnet.services.rag.ingest.ocr import ScanReader, ocr_route
from hearthnet.services.rag.ingest.read import MAX_TEXT_BYTES
from hearthnet.services.rag.inputs import IngestInput
from hearthnet.services.rag.offers import CorpusOffers
from hearthnet.services.rag.store import CorpusStore, DocumentSource

__all__ = ["Ingestion"]

log = structlog.get_logger("hearthnet.rag")

Output = tuple[dict[str, Any], dict[str, Any]]


class Ingestion:
    """The ingest and reindex steps of the RAG service (which holds the gate and the document's lock)."""

    def __init__(
        self,
        *,
        bus: BusAPI,
        store: CorpusStore,
        blobs: BlobStore,
        embedder: Embedder,
        offers: CorpusOffers,
        append_event: AppendEvent,
        find_event: FindEvent,
        changed: Callable[[str], None],
        store_limiter: anyio.CapacityLimiter,
        read_threads: WorkerThreads,
        readers: DocumentReaders,
        append_events: AppendEvents | None = None,
        announce_deletions: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._bus = bus
        self._announce_deletions = announce_deletions
        """Appends the deletions a write owes (the documents it replaced: ``Deletions.announce_pending``)."""
        self._append_events = append_events
        self._store = store
        self._blobs = blobs
        self._embedder = embedder
        self._offers = offers
        self._append_event = append_event
        self._find_event = find_event
        self._changed = changed
        self._store_limiter = store_limiter
        self._read_threads = read_threads
        self._reader_limiter = anyio.CapacityLimiter(4)
        """Threads reading documents (ingests and a reindex); each mostly waits for the embedder."""
        self._readers = readers
        """Where documents are read: each parsed format in a worker process that a caller's
        deadline or cancellation kills (:mod:`.isolated`); no slot is shared across pages."""

    @property
    def model(self) -> str:
        return self._embedder.model

    # rag.ingest ----------------------------------------------------------------------------
    async def ingest(self, ctx: CallContext, started: float, corpus: str, inp: IngestInput) -> Output:
        """``rag.ingest`` of one document: a batch of one (:meth:`ingest_many`'s path), its failure
        raised; one stored already is repaired."""
        done, truncated = await self._ingest_documents(ctx, started, corpus, [inp])
        one = done[inp.doc_cid]
        if one.error is not None:
            raise one.error
        meta: dict[str, Any] = {"corpus": corpus, "ms": _ms(started), "ingest_event_id": one.event_id}
        if one.existing:
            meta["existing"] = True
        else:
            meta.update(embedding_model=self.model, truncated=truncated, pages=one.pages)
        return one.output, meta

    # rag.ingest {documents} -----------------------------------------------------------------
    async def ingest_many(
        self, ctx: CallContext, started: float, corpus: str, inputs: list[IngestInput]
    ) -> Output:
        """Ingest several documents with one embedding pass, one store write and one announcement.

        Each document stays atomic and idempotent on its own (the store's per-document unit,
        :meth:`CorpusStore.add_documents`): one stored already is repaired and answered as
        ``existing``, one that cannot be fetched or read is answered with its error, and the
        others go on.  Output: ``{documents: [...], chunks_indexed, tokens_indexed}``, an entry
        per input in order: ``{doc_cid, ok: true, chunks_indexed, tokens_indexed, existing,
        ingest_event_id}`` or ``{doc_cid, ok: false, error, message}``.
        """
        done, _ = await self._ingest_documents(ctx, started, corpus, inputs)
        documents = [done[d.doc_cid].entry(d.doc_cid) for d in inputs]
        ok = [d for d in documents if d["ok"]]
        log.info(
            "rag_ingested_batch",
            corpus=corpus,
            docs=len(inputs),
            new=sum(1 for d in ok if not d["existing"]),
            failed=len(documents) - len(ok),
            ms=_ms(started),
        )
        return (
            {
                "documents": documents,
                "chunks_indexed": sum(int(d["chunks_indexed"]) for d in ok),
                "tokens_indexed": sum(int(d["tokens_indexed"]) for d in ok),
            },
            {"corpus": corpus, "ms": _ms(started), "embedding_model": self.model},
        )

    async def _ingest_documents(
        self, ctx: CallContext, started: float, corpus: str, inputs: list[IngestInput]
    ) -> tuple[dict[str, _Done], int]:
        """The one way documents come in: those stored already repaired, the others fetched, read
        and embedded together, written in one write and announced; per document what came of it,
        and the chunks the embedder truncated."""
        done: dict[str, _Done] = {}
        found = await self._existing_many(corpus, [d.doc_cid for d in inputs])
        for doc_cid, existing in found.items():
            output, meta = await self._repair(started, corpus, doc_cid, *existing)
            done[doc_cid] = _Done(output, meta["ingest_event_id"], existing=True)
        fresh = [d for d in inputs if d.doc_cid not in found]
        if fresh:
            registered = self._offers.query_params(corpus)
            if registered is not None and str(registered["embedding_model"]) != self.model:
                # before any fetch, read or embedding: the write at the end would be refused anyway
                raise embedded_with_another(
                    corpus, str(registered["embedding_model"]), self.model, then=" first"
                )
            await ctx.send({"stage": "fetch", "current": 0, "total": len(fresh)})
            fresh = await self._fetch_many(ctx, fresh, done)
        if not fresh:
            return done, 0
        await ctx.send({"stage": "read", "current": 0, "total": len(fresh)})
        read = await self._read_many(fresh, deadline=ctx.deadline, progress=ctx.send)
        for o in read.outcomes:
            if o.error is not None:
                done[o.inp.doc_cid] = _Done({}, None, error=o.error)
        readable = [o for o in read.outcomes if o.error is None]
        if readable:
            done.update(await self._write_many(ctx, corpus, readable))
            for o in readable:
                assert o.prepared is not None
                done[o.inp.doc_cid].output.update(
                    await self._attached(ctx, started, corpus, o.inp, o.prepared)
                )
        return done, read.truncated

    async def _attached(
        self, ctx: CallContext, started: float, corpus: str, inp: IngestInput, prepared: PreparedDocument
    ) -> dict[str, Any]:
        """An e-mail's attachments ingested as documents of their own (:mod:`.attachments`):
        ``{attachments: [...]}`` for the answer, ``{}`` for a document without any."""
        attached = await ingest_attachments(
            self.ingest_many,
            self._blobs,
            ctx,
            started,
            corpus,
            inp,
            prepared.attachments,
            limiter=self._store_limiter,
        )
        return {"attachments": attached} if attached else {}

    async def _existing_many(
        self, corpus: str, doc_cids: list[str]
    ) -> dict[str, tuple[dict[str, Any], dict[str, Any], str | None]]:
        """:meth:`_existing` of several documents: the store asked once, the log for those stored."""

        def lookup() -> dict[str, dict[str, Any]]:
            if corpus not in self._store.corpora():
                return {}
            docs = {c: self._store.document(corpus, c) for c in doc_cids}
            return {c: d for c, d in docs.items() if d is not None}

        stored = await run_blocking(lookup, limiter=self._store_limiter)
        out = {}
        for doc_cid, doc in stored.items():
            output = {"doc_cid": doc_cid, "chunks_indexed": doc["chunks"], "tokens_indexed": doc["tokens"]}
            event_id = await run_blocking(self._find_event, corpus, doc_cid, limiter=self._read_threads)
            out[doc_cid] = (output, doc, event_id)
        return out

    async def _fetch_many(
        self, ctx: CallContext, inputs: list[IngestInput], results: dict[str, _Done]
    ) -> list[IngestInput]:
        """The documents whose blobs are here (fetched from the caller when not); the others'
        errors go to ``results``."""
        held = await run_blocking(
            lambda: {d.doc_cid for d in inputs if self._blobs.has_blob(d.doc_cid)},
            limiter=self._store_limiter,
        )
        hint = None if ctx.is_local else ctx.caller
        files = FileClient(self._bus)
        ready = []
        for d in inputs:
            if d.doc_cid not in held:
                try:
                    await files.fetch(
                        d.doc_cid, hint=hint, provider=self._bus.node_id, timeout=max(30.0, ctx.remaining())
                    )
                except BusError as exc:
                    results[d.doc_cid] = _Done({}, None, error=exc)
                    continue
            ready.append(d)
        return ready

    async def _write_many(
        self, ctx: CallContext, corpus: str, outcomes: list[ReadOutcome]
    ) -> dict[str, _Done]:
        """Store the read documents in one write, then announce them (one registration, their
        events appended together, their sources pinned)."""
        docs = []
        for o in outcomes:
            assert o.prepared is not None and o.vectors is not None
            source = DocumentSource(
                filename=o.inp.filename,
                pages=o.prepared.document.page_count,
                ingested_by=ctx.caller,
                replaces=o.inp.replaces,
            )
            docs.append((o.prepared.chunks, o.vectors, source))
        dim = int(docs[0][1].shape[1])
        await run_blocking(
            lambda: self._store.create_corpus(corpus, embedding_model=self.model, dim=dim),
            limiter=self._store_limiter,
        )
        await ctx.send({"stage": "write", "current": 0, "total": sum(len(c) for c, _, _ in docs)})
        # Once the write starts, the documents are registered and announced even if the caller's
        # deadline passes or it walks away meanwhile: a stored document that no query can reach
        # and no member hears of would be worse than an answer that comes late.
        with anyio.CancelScope(shield=True):
            await run_blocking(lambda: self._store.add_documents(corpus, docs), limiter=self._store_limiter)
            await self._replaced([o.inp.replaces for o in outcomes if o.inp.replaces])
            await self._offers.announce(corpus)
            self._changed(corpus)
            events = await self._emit_many(
                corpus,
                [
                    (
                        o.inp.doc_cid,
                        str(o.prepared.chunks[0].metadata.get("doc_title", o.inp.title)),
                        o.prepared.language,
                        len(o.prepared.chunks),
                    )
                    for o in outcomes
                    if o.prepared is not None
                ],
            )
            for o in outcomes:
                await self._keep_source(o.inp.doc_cid)
        out = {}
        for o, event_id in zip(outcomes, events, strict=True):
            assert o.prepared is not None
            log.info(  # ids and counts only
                "rag_ingested",
                corpus=corpus,
                doc_cid=o.inp.doc_cid,
                chunks=len(o.prepared.chunks),
                pages=o.prepared.document.page_count,
                ocr_pages=len(o.prepared.ocr_pages),
                batch=len(outcomes) > 1,
            )
            output = {
                "doc_cid": o.inp.doc_cid,
                "chunks_indexed": len(o.prepared.chunks),
                "tokens_indexed": int(sum(int(c.metadata.get("tokens", 0)) for c in o.prepared.chunks)),
                "ocr_pages": list(o.prepared.ocr_pages),
            }
            out[o.inp.doc_cid] = _Done(output, event_id, pages=o.prepared.document.page_count)
        return out

    async def _emit_many(self, corpus: str, docs: list[tuple[str, str, str, int]]) -> list[str]:
        """The ingest events of ``(doc_cid, title, language, chunks)``, appended together."""
        if not announced(corpus):
            return ["" for _ in docs]
        if self._append_events is None:
            return [await self._emit(corpus, *d) for d in docs]
        items = [
            {"corpus": corpus, "doc_cid": c, "title": t[:MAX_TITLE], "language": lang, "chunks": n}
            for c, t, lang, n in docs
        ]
        return await self._append_events(INGESTED, items)

    async def _existing(
        self, corpus: str, doc_cid: str
    ) -> tuple[dict[str, Any], dict[str, Any], str | None] | None:
        """A complete document's output, its ledger record and its ingest event id (if any)."""

        def lookup() -> dict[str, Any] | None:
            if corpus not in self._store.corpora():
                return None
            return self._store.document(corpus, doc_cid)

        doc = await run_blocking(lookup, limiter=self._store_limiter)
        if doc is None:
            return None
        output = {"doc_cid": doc_cid, "chunks_indexed": doc["chunks"], "tokens_indexed": doc["tokens"]}
        # A scan of the log's ingest events (SQLite and decoding): never on the event loop.
        event_id = await run_blocking(self._find_event, corpus, doc_cid, limiter=self._read_threads)
        return output, doc, event_id

    async def _repair(
        self,
        started: float,
        corpus: str,
        doc_cid: str,
        output: dict[str, Any],
        doc: dict[str, Any],
        event_id: str | None,
    ) -> Output:
        """A document stored already: what a kill or a cut call left undone is done now."""
        with anyio.CancelScope(shield=True):  # repairs: finished even if the caller walks away
            if self._offers.query_params(corpus) is None:
                # stored, but the node died or the call was cut before it was registered
                await self._offers.announce(corpus)
            if event_id is None:
                # Stored, but the event was never appended (e.g. the node died between the
                # two): announce it as it was stored, not as this caller describes it.
                event_id = await self._emit(
                    corpus, doc_cid, doc["title"], doc["language"] or "und", output["chunks_indexed"]
                )
            await self._keep_source(doc_cid)
        return output, {"corpus": corpus, "ms": _ms(started), "ingest_event_id": event_id, "existing": True}

    async def _emit(self, corpus: str, doc_cid: str, title: str, language: str, chunks: int) -> str:
        if not announced(corpus):
            return ""  # the personal corpus is never announced to the community
        data = {
            "corpus": corpus,
            "doc_cid": doc_cid,
            "title": title[:MAX_TITLE],
            "language": language,
            "chunks": chunks,
        }
        return await self._append_event(INGESTED, data)

    async def _replaced(self, doc_cids: list[str]) -> None:
        """Announce the documents a write replaced (their deletions were owed from its commit)."""
        if doc_cids and self._announce_deletions is not None:
            await self._announce_deletions()

    async def _keep_source(self, doc_cid: str) -> None:
        """Pin an indexed document's blob: ``rag reindex`` re-embeds the corpus from it.

        Callers import and push documents unpinned, so that a file refused on the way
        leaves nothing held; once a document is in a corpus its source must outlive
        the blob store's garbage collection.  A source that is already gone (indexed
        before sources were pinned, then collected) is left for ``rag reindex`` to report;
        a pin that fails otherwise is logged and never fails the ingest, which is done.
        """
        try:
            await run_blocking(self._blobs.pin, doc_cid, limiter=self._store_limiter)
        except NotFound:
            pass
        except BusError as exc:
            log.warning("rag_source_not_pinned", doc_cid=doc_cid, code=exc.code, reason=exc.message[:200])
        except (OSError, sqlite3.Error) as exc:  # the blob index failing: the ingest itself is done
            log.warning(
                "rag_source_not_pinned", doc_cid=doc_cid, code="internal_error", reason=str(exc)[:200]
            )

    # read and embed ------------------------------------------------------------------------
    async def _read_many(
        self,
        inputs: list[IngestInput],
        *,
        deadline: float,
        progress: Progress | None,
        max_text_bytes: int | None = MAX_TEXT_BYTES,
    ) -> BatchRead:
        """Read and chunk stored blobs in a worker while their first chunks are already embedded
        (:func:`read_and_embed_many`); the bytes are read in a worker process killed when
        ``deadline`` passes or this is cancelled, scanned pages by ``ocr.page`` on the way."""
        async with stopped_at(deadline, "reading the documents") as stop:
            return await read_and_embed_many(
                inputs,
                blobs=self._blobs,
                embedder=self._embedder,
                max_tokens=self._embedder.max_tokens(),
                read_parts=self._readers.reader(stop),
                limiter=self._reader_limiter,
                progress=progress,
                scans=self._scans(deadline, progress),
                kept=self._store.kept,
                max_text_bytes=max_text_bytes,
            )

    def _scans(self, deadline: float, progress: Progress | None) -> Callable[[str], ScanReader | None]:
        """Who reads a document's scanned pages (``ocr.page``: this node's, else a peer's; a
        private document's only this node's), or ``None`` for a document no OCR may read; called
        in the reader's thread."""
        route = ocr_route(self._bus)

        def scans(doc_cid: str) -> ScanReader | None:
            if route is None:
                return None
            private = self._blobs.is_private(doc_cid)
            return route.reader(doc_cid, private=private, deadline=deadline, progress=progress)

        return scans

    # rag.reindex ---------------------------------------------------------------------------
    async def reindex(self, ctx: CallContext, corpus: str, progress: Reindexing) -> int:
        """Re-embed every document of ``corpus`` from its source blob, then swap the corpus in."""
        docs = await run_blocking(self._store.documents, corpus, limiter=self._store_limiter)
        if not docs:
            raise NotFound(f"corpus {corpus} has no documents to reindex")
        missing = await run_blocking(
            lambda: [d["doc_cid"] for d in docs if not self._blobs.has_blob(d["doc_cid"])],
            limiter=self._store_limiter,
        )
        if missing:
            raise NotFound(
                f"{len(missing)} source documents of {corpus} are not in this node's blob store "
                f"(first: {missing[0]}); fetch them with 'hearthnet file get' first"
            )
        progress.total = len(docs)
        prepared_docs = []
        for i, doc in enumerate(docs):
            one = IngestInput(
                doc_cid=doc["doc_cid"],
                title=str(doc["title"]),
                language=doc["language"],
                metadata=doc["metadata"],  # what the caller gave at ingest: filters on it keep working
                filename=doc["filename"],  # so its chunks keep their doc_filename
            )
            # it was accepted once (perhaps before the text cap): it is taken again whatever its size
            (read,) = (
                await self._read_many([one], deadline=ctx.deadline, progress=None, max_text_bytes=None)
            ).outcomes
            if read.error is not None:
                raise read.error
            assert read.prepared is not None and read.vectors is not None
            prepared_docs.append((read.prepared.chunks, read.vectors))
            progress.done = i + 1
            await ctx.send({"stage": "reindex", "current": i + 1, "total": len(docs)})
        dim = int(prepared_docs[0][1].shape[1])
        with anyio.CancelScope(shield=True):  # the swap and the new registration go together
            await run_blocking(
                lambda: self._store.replace_corpus(
                    corpus, embedding_model=self.model, dim=dim, documents=prepared_docs
                ),
                limiter=self._store_limiter,
            )
            # The registry removes a registration by its exact params (which name the old model):
            # the announce replaces them with the new model's.
            await self._offers.announce(corpus)
            self._changed(corpus)
        return len(docs)


@dataclass
class _Done:
    """What came of one document of an ingest: its output and ingest event (``existing``: it was
    stored already), or the error that stopped it."""

    output: dict[str, Any]
    event_id: str | None
    existing: bool = False
    pages: int | None = None
    error: BusError | None = None

    def entry(self, doc_cid: str) -> dict[str, Any]:
        """The document's entry in a batch's output."""
        if self.error is not None:
            return {"doc_cid": doc_cid, "ok": False, "error": self.error.code, "message": self.error.message}
        return {**self.output, "ok": True, "existing": self.existing, "ingest_event_id": self.event_id}


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
