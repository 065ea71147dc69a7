"""``rag.query``, ``rag.ingest``, ``rag.list_corpora``, ``rag.list_documents``, ``rag.delete``
(and ``rag.reindex``, this node only).

``rag.query``, ``rag.list_documents`` and ``rag.delete`` are registered once
per corpus with params naming it (and its ``docs`` and ``chunks``, which rank
two hosts of one name) so that callers on other nodes are routed to the node
holding the corpus.  ``personal`` is registered local-only (never advertised,
refused to remote callers); ``system`` is read-only.  A corpus whose recorded
model differs from this node's embedding model is not served: its
``rag.query`` answers ``not_found`` with the reindex command.  A corpus name is
one corpus in the community: creating one that another node hosts is refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.blobs import BlobStore
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, params_key_equals
from hearthnet.community.levels import Level
from hearthnet.contracts.embed import Embedder
from hearthnet.contracts.rag import (
    INGESTED,
    MAX_K,
    MAX_TITLE,
    PERSONAL,
    SYSTEM,
    host_label,
    validate_corpus_name,
)
from hearthnet.errors import BadRequest, BusError, NotFound, Unauthorized, unwrap_group
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.chunker import Chunk
from hearthnet.services.rag.deletion import AppendEvent, Deletions, FindEvent
from hearthnet.services.rag.filters import filter_keys
from hearthnet.services.rag.gate import CorpusGate, Reindexing
from hearthnet.services.rag.ingest import (
    EmbeddedDocument,
    PreparedDocument,
    Progress,
    StreamedDocument,
    embed_streamed,
)
from hearthnet.services.rag.inputs import (
    IngestInput,
    delete_input,
    ingest_input,
    list_input,
    query_input,
)
from hearthnet.services.rag.reader import MAX_TEXT_BYTES
from hearthnet.services.rag.store import CorpusInfo, CorpusStore, DocumentSource, ScoredChunk

log = structlog.get_logger("hearthnet.rag")

INLINE_SEARCH_FLOATS = 6_000_000
"""A corpus held in memory with at most this many vector components (~15,600 chunks of 384-d,
24 MB) is searched on the event loop: about a millisecond of it here, against two thread hops
(0.2-0.7 ms measured on this path); larger ones are searched in a read thread."""


OwnLevel = Callable[[], Level | None]
CorpusChanged = Callable[[str], None]
"""Told the corpus name after this node changed its documents (the personal corpus included)."""


@dataclass(frozen=True)
class RagSettings:
    embedding_model: str
    query_timeout_seconds: float = 5.0
    embed_timeout_seconds: float = 10.0
    accept_new_corpora: bool = True
    store_threads: int = 2


PAGES_AHEAD = 16
"""Pages of chunks read ahead of the embedding during an ingest: more than one embed call
takes (~9 pages of 32 chunks here), so the next call's chunks are ready when the last returns."""


class RagService:
    name = "rag"

    def __init__(
        self,
        *,
        bus: BusAPI,
        store: CorpusStore,
        blobs: BlobStore,
        settings: RagSettings,
        append_event: AppendEvent,
        find_event: FindEvent,
        own_level: OwnLevel,
        corpus_changed: CorpusChanged | None = None,
    ) -> None:
        self._bus = bus
        self._corpus_changed = corpus_changed
        self._store = store
        self._blobs = blobs
        self._settings = settings
        self._append_event = append_event
        self._find_event = find_event
        self._own_level = own_level
        self._embedder = Embedder(bus, settings.embedding_model, settings.embed_timeout_seconds)
        self._store_limiter = anyio.CapacityLimiter(settings.store_threads)
        """Threads for store writes (and the reads of ingest and reindex)."""
        self._read_threads = WorkerThreads(settings.store_threads, "rag-read")
        """Threads for queries and listings: a query never waits behind a long write (and pays
        one pass through the event loop to reach one, see :mod:`hearthnet.runtime.worker_threads`)."""
        self._reader_limiter = anyio.CapacityLimiter(4)
        """Threads reading documents (ingests and a reindex); each mostly waits for the embedder."""
        self._parse_slot = threading.BoundedSemaphore(1)
        """Held while a reader parses and chunks one page (CPU): never while it waits for the embedder."""
        self._doc_locks: dict[tuple[str, str], tuple[anyio.Lock, list[int]]] = {}
        """(corpus, doc_cid) -> its ingest lock and how many ingests hold or await it."""
        self._gate = CorpusGate()
        self._announce_lock = anyio.Lock()
        self._registered_corpora: dict[str, dict[str, Any]] = {}
        """corpus -> the params of its ``rag.query`` registration (the registry removes by them)."""
        self._corpus_params: dict[str, dict[str, dict[str, Any]]] = {}
        """corpus -> capability -> params of its other per-corpus registrations."""
        self._ingest_params: dict[str, Any] | None = None
        self._deletions = Deletions(
            store=store,
            blobs=blobs,
            node_id=bus.node_id,
            store_limiter=self._store_limiter,
            read_threads=self._read_threads,
            append_event=append_event,
            find_event=find_event,
            counts_changed=self._documents_changed,
        )
        self.queries = 0
        self.ingests = 0
        self.deletes = 0

    # Service protocol ---------------------------------------------------------------
    async def start(self) -> None:
        recovered = await run_blocking(self._store.recover, limiter=self._store_limiter)
        if any(recovered.values()):
            log.warning("partial_documents_removed", corpora={k: v for k, v in recovered.items() if v})
        # Small corpora are searched exactly from memory: load them now, not on the first query.
        await run_blocking(self._store.warm_exact, limiter=self._store_limiter)
        await self._deletions.announce_pending()

    async def stop(self) -> None:
        await anyio.to_thread.run_sync(self._store.close)
        self._read_threads.close()

    def registrations(self) -> list[Registration]:
        """What the node registers at start (reads the store: before the node serves anything)."""
        corpora = self._store.corpora()
        regs = [self._ingest_registration(corpora), self._list_registration(), self._reindex_registration()]
        for corpus in corpora:
            regs.extend(self._corpus_registrations(self._store.info(corpus)))
        return regs

    def health(self) -> dict[str, Any]:
        """Served to peers by ``node.stats``: the personal corpus is never named."""
        return {
            "corpora": sorted(c for c in self._registered_corpora if c != PERSONAL),
            "queries": self.queries,
            "ingests": self.ingests,
            "deletes": self.deletes,
            "embedding_model": self._settings.embedding_model,
        }

    # registrations ------------------------------------------------------------------
    def _corpus_registrations(self, info: CorpusInfo) -> list[Registration]:
        """``rag.query``, ``rag.list_documents`` and ``rag.delete`` of one corpus.

        The params carry the corpus's ``docs`` and ``chunks``: the predicates
        match on ``corpus`` alone, and the router tries the host advertising
        more chunks first, so a second, smaller copy of a name never wins.
        """
        corpus = info.name
        size = {"docs": info.docs, "chunks": info.chunks}
        query = {"corpus": corpus, "embedding_model": info.embedding_model, "k_max": MAX_K, **size}
        listing = {"corpus": corpus, **size}
        delete = {"corpus": corpus}
        self._registered_corpora[corpus] = query
        self._corpus_params[corpus] = {"rag.list_documents": listing, "rag.delete": delete}
        local_only = corpus == PERSONAL
        by_corpus = params_key_equals("corpus")
        return [
            Registration(
                CapabilityDescriptor(
                    "rag.query",
                    (1, 0),
                    params=query,
                    max_concurrent=8,
                    timeout_seconds=self._settings.query_timeout_seconds,
                    idempotent=True,
                    local_only=local_only,
                    description=f"search corpus {corpus}",
                ),
                self._handle_query,
                by_corpus,
            ),
            Registration(
                CapabilityDescriptor(
                    "rag.list_documents",
                    (1, 0),
                    params=listing,
                    max_concurrent=8,
                    timeout_seconds=10.0,
                    idempotent=True,
                    local_only=local_only,
                    description=f"documents of corpus {corpus}",
                ),
                self._handle_list_documents,
                by_corpus,
            ),
            Registration(
                CapabilityDescriptor(
                    "rag.delete",
                    (1, 0),
                    params=delete,
                    trust_required=Level.TRUSTED,
                    max_concurrent=2,
                    timeout_seconds=300.0,
                    idempotent=True,
                    local_only=local_only,
                    description=f"delete a document of corpus {corpus}",
                ),
                self._handle_delete,
                by_corpus,
            ),
        ]

    def _unregister_corpus(self, corpus: str) -> None:
        """Remove the corpus's registrations (by their exact params, as the registry needs)."""
        query = self._registered_corpora.pop(corpus, None)
        if query is not None:
            self._bus.unregister("rag.query", query)
        for capability, params in self._corpus_params.pop(corpus, {}).items():
            self._bus.unregister(capability, params)

    def _ingest_registration(self, held: Sequence[str]) -> Registration:
        self._ingest_params = {
            "corpora": sorted(c for c in held if c != PERSONAL),
            "accepts_new": self._settings.accept_new_corpora,
            "embedding_model": self._settings.embedding_model,
        }
        descriptor = CapabilityDescriptor(
            "rag.ingest",
            (1, 0),
            params=self._ingest_params,
            trust_required=Level.TRUSTED,
            max_concurrent=2,
            timeout_seconds=900.0,
            idempotent=True,
            streaming=True,
        )
        return Registration(descriptor, self._handle_ingest)

    def _list_registration(self) -> Registration:
        return Registration(
            CapabilityDescriptor(
                "rag.list_corpora", (1, 0), max_concurrent=8, timeout_seconds=10.0, idempotent=True
            ),
            self._handle_list,
        )

    def _reindex_registration(self) -> Registration:
        return Registration(
            CapabilityDescriptor(
                "rag.reindex",
                (1, 0),
                timeout_seconds=3600.0,
                local_only=True,
                streaming=True,
                max_concurrent=1,
            ),
            self._handle_reindex,
        )

    async def _announce_corpus(self, corpus: str) -> None:
        """Register a corpus (again, with its new counts) and advertise it in rag.ingest's params.

        After every ingest, delete and reindex.  The store is read in a worker
        thread: its lock may be held for a while by a write (a reindex's swap,
        a ChromaDB server call), and the event loop must never wait for it.
        """

        def read() -> tuple[CorpusInfo, list[str]]:
            return self._store.info(corpus), self._store.corpora()

        # One at a time, each reading the store inside: two announces resuming in the other
        # order would register the older corpus list last (a new corpus missing from it).
        async with self._announce_lock:
            info, held = await run_blocking(read, limiter=self._read_threads)
            self._unregister_corpus(corpus)  # the old counts (or model): the same event-loop step
            for registration in self._corpus_registrations(info):
                self._bus.register(registration)
            if self._ingest_params is not None:
                self._bus.unregister("rag.ingest", self._ingest_params)
            self._bus.register(self._ingest_registration(held))

    # rag.query ----------------------------------------------------------------------
    async def _handle_query(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        if corpus == PERSONAL and not ctx.is_local:
            raise NotFound("corpus personal is never reachable from another node")
        query, k, where, include_text = query_input(ctx.input)
        registered = self._registered_corpora.get(corpus)
        if registered is None:
            raise NotFound(f"corpus {corpus} is not held by this node")
        model = str(registered["embedding_model"])
        if model != self._settings.embedding_model:
            raise NotFound(
                f"corpus {corpus} was embedded with {model} but this node embeds with "
                f"{self._settings.embedding_model}: run 'hearthnet rag reindex --corpus {corpus}'"
            )
        embedding = time.perf_counter()
        vectors = (await self._embedder.embed([query])).vectors
        embedded = time.perf_counter()
        hits = self._store.query_in_memory(
            corpus, vectors[0], k=k, where=where, include_text=include_text, max_floats=INLINE_SEARCH_FLOATS
        )
        known_keys = None
        if hits is None:

            def search() -> tuple[list[ScoredChunk], frozenset[str] | None]:
                found = self._store.query(corpus, vectors[0], k=k, where=where, include_text=include_text)
                return found, self._store.metadata_keys(corpus) if where else None

            hits, known_keys = await run_blocking(search, limiter=self._read_threads)
        warnings = self._duplicate_warnings(corpus, "this answer")
        if where and known_keys is not None:
            for key in sorted(filter_keys(where) - known_keys):
                warnings.append(
                    f"no document of corpus {corpus} has the metadata field {key!r} (misspelled?): "
                    f"the filter cannot match on it; its fields are {', '.join(sorted(known_keys))}"
                )
        chunks = []
        for rank, hit in enumerate(hits, start=1):
            item: dict[str, Any] = {
                "rank": rank,
                "score": round(float(hit.score), 6),
                "metadata": {**hit.metadata, "chunk_id": hit.chunk_id},
            }
            if include_text:
                item["text"] = hit.text
            chunks.append(item)
        self.queries += 1
        ms = round((time.perf_counter() - started) * 1000, 3)
        log.info(
            "rag_query", corpus=corpus, k=k, hits=len(chunks), ms=ms, caller=ctx.caller, trace_id=ctx.trace_id
        )
        meta: dict[str, Any] = {
            "corpus": corpus,
            "ms": ms,
            "embed_ms": round((embedded - embedding) * 1000, 3),
            "embedding_model": model,
        }
        if warnings:
            meta["warnings"] = warnings
        return {"chunks": chunks}, meta

    def _duplicate_warnings(self, corpus: str, what: str) -> list[str]:
        """A warning when other nodes host a corpus of the same name (made before names were
        checked, or by two nodes creating it at once): ``what`` covers only this node's copy."""
        if corpus == PERSONAL:
            return []
        others = [p for p in self._bus.providers("rag.query", (1, 0), {"corpus": corpus}) if not p.is_local]
        if not others:
            return []
        own = self._registered_corpora.get(corpus, {}).get("chunks", "?")
        elsewhere = ", ".join(
            f"{p.node_id} ({p.descriptor.params.get('chunks', '?')} chunks)" for p in others
        )
        return [
            f"corpus {corpus} is hosted on {len(others) + 1} nodes (one name, separate copies): {what} "
            f"covers only the copy on {self._bus.node_id} ({own} chunks); also on {elsewhere}"
        ]

    # rag.ingest ---------------------------------------------------------------------
    async def _handle_ingest(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        if corpus == SYSTEM:
            raise BadRequest("corpus system is read-only")
        if corpus == PERSONAL and not ctx.is_local:
            raise Unauthorized("corpus personal only takes documents from this node itself")
        inp = ingest_input(ctx.input)
        if corpus != PERSONAL:  # personal is never announced, so it needs no trust
            await self._check_own_trust("announce ingests")
        held = await run_blocking(self._store.corpora, limiter=self._read_threads)
        if corpus not in held:
            if not ctx.is_local and not self._settings.accept_new_corpora:
                raise NotFound(
                    f"corpus {corpus} is not held by this node, and it accepts no new corpora from "
                    "other nodes (rag.accept_new_corpora = false): ingest on a node that holds it"
                )
            if corpus != PERSONAL:  # every node has a personal corpus of its own
                await self._refuse_a_second_host(corpus)
        async with self._gate.ingest(corpus), self._doc_lock(corpus, inp.doc_cid):
            # one ingest (or delete) of a document at a time; a repeat finds it stored
            return await self._ingest(ctx, started, corpus, inp)

    @contextlib.asynccontextmanager
    async def _doc_lock(self, corpus: str, doc_cid: str) -> AsyncIterator[None]:
        """Ingests and deletes of one document one at a time (no lock kept per document ever seen)."""
        key = (corpus, doc_cid)
        held = self._doc_locks.get(key)
        if held is None:
            held = self._doc_locks[key] = (anyio.Lock(), [0])
        lock, users = held
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._doc_locks[key]

    async def _check_own_trust(self, what: str) -> None:
        """This node signs the event: it must be trusted (read off the event loop: the log's lock
        may be held by a long gossip replay)."""
        own = await run_blocking(self._own_level, limiter=self._read_threads)
        if own is None or own < Level.TRUSTED:
            node = self._bus.node_id
            standing = "not a member" if own is None else f"only a {own.label}"
            raise Unauthorized(
                f"node {node} is {standing} of its community, not trusted, so it may not {what}; "
                f"an anchor can promote it ('hearthnet member promote {node} --level trusted')"
            )

    async def _known_hosts(self, corpus: str) -> list[dict[str, Any]]:
        """The hosts of ``corpus`` that ``rag.known_corpora`` (this node's catalog) knows of."""
        try:
            result = await self._bus.call(
                "rag.known_corpora", input={"corpus": corpus}, provider=self._bus.node_id, timeout=10.0
            )
        except NotFound:
            return []  # a bus without the catalog (a test's): nothing known beyond this node
        return [h for c in result.output.get("corpora", []) for h in c.get("hosts", [])]

    async def _refuse_a_second_host(self, corpus: str) -> None:
        """A corpus name is one corpus in the community: ``bad_request`` if another node hosts it.

        Asked of the catalog (the event log's announcements and the hosts
        advertising it now), so a second client, or a host that is offline,
        cannot lead to a second copy.  Two nodes creating one name at the same
        moment can still race (neither has heard of the other yet); ``hearthnet
        corpora`` flags such duplicates, and queries go to the larger copy.
        """
        others = [
            h for h in await self._known_hosts(corpus) if h["hosting"] and h["node"] != self._bus.node_id
        ]
        if not others:
            return
        host = others[0]
        where = host_label(host["node"], host.get("node_name"))
        state = "" if host["online"] else ", offline now"
        raise BadRequest(
            f"corpus {corpus} already exists on node {where} ({host['docs']} documents{state}): a corpus "
            f"name is one corpus in the community; ingest into it there "
            f"('hearthnet ingest ... --corpus {corpus} --on {host['node']}') or choose another name"
        )

    async def _ingest(
        self, ctx: CallContext, started: float, corpus: str, inp: IngestInput
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        doc_cid = inp.doc_cid
        existing = await self._existing(corpus, doc_cid)
        if existing is not None:
            output, doc, event_id = existing
            with anyio.CancelScope(shield=True):  # repairs: finished even if the caller walks away
                if corpus not in self._registered_corpora:
                    # stored, but the node died or the call was cut before it was registered
                    await self._announce_corpus(corpus)
                if event_id is None:
                    # Stored, but the event was never appended (e.g. the node died between the
                    # two): announce it as it was stored, not as this caller describes it.
                    event_id = await self._emit(
                        corpus, doc_cid, doc["title"], doc["language"] or "und", output["chunks_indexed"]
                    )
                await self._keep_source(doc_cid)
            return output, {
                "corpus": corpus,
                "ms": _ms(started),
                "ingest_event_id": event_id,
                "existing": True,
            }
        registered = self._registered_corpora.get(corpus)
        if registered is not None and str(registered["embedding_model"]) != self._settings.embedding_model:
            # before any fetch, read or embedding: the write at the end would be refused anyway
            raise NotFound(
                f"corpus {corpus} was embedded with {registered['embedding_model']} but this node embeds "
                f"with {self._settings.embedding_model}: run 'hearthnet rag reindex --corpus {corpus}' first"
            )
        await ctx.send({"stage": "fetch", "current": 0, "total": 1})
        hint = None if ctx.is_local else ctx.caller
        await self._bus.call(
            "file.fetch",
            (1, 0),
            input={"doc_cid": doc_cid, "hint": hint},
            provider=self._bus.node_id,
            timeout=max(30.0, ctx.remaining()),
        )
        max_tokens = self._embedder.max_tokens()
        await ctx.send({"stage": "read", "current": 0, "total": 1})

        prepared, embedded = await self._read_and_embed(
            doc_cid,
            title=inp.title,
            language=inp.language,
            filename=inp.filename,
            metadata=inp.metadata,
            max_tokens=max_tokens,
            progress=ctx.send,
        )
        dim = int(embedded.vectors.shape[1])
        await run_blocking(
            lambda: self._store.create_corpus(
                corpus, embedding_model=self._settings.embedding_model, dim=dim
            ),
            limiter=self._store_limiter,
        )
        await ctx.send({"stage": "write", "current": 0, "total": len(prepared.chunks)})
        # Once the write starts, the document is registered and announced even if the caller's
        # deadline passes or it walks away meanwhile: a stored document that no query can reach
        # and no member hears of would be worse than an answer that comes late.
        with anyio.CancelScope(shield=True):
            source = DocumentSource(
                filename=inp.filename, pages=prepared.document.page_count, ingested_by=ctx.caller
            )
            await run_blocking(
                lambda: self._store.add_document(corpus, prepared.chunks, embedded.vectors, source=source),
                limiter=self._store_limiter,
            )
            await self._announce_corpus(corpus)
            self._changed(corpus)
            doc_title = str(prepared.chunks[0].metadata.get("doc_title", inp.title))
            event_id = await self._emit(corpus, doc_cid, doc_title, prepared.language, len(prepared.chunks))
            await self._keep_source(doc_cid)
        tokens = int(sum(int(c.metadata.get("tokens", 0)) for c in prepared.chunks))
        self.ingests += 1
        log.info(
            "rag_ingested",
            corpus=corpus,
            doc_cid=doc_cid,
            chunks=len(prepared.chunks),
            pages=prepared.document.page_count,
            truncated=embedded.truncated,
            ms=_ms(started),
        )
        return (
            {"doc_cid": doc_cid, "chunks_indexed": len(prepared.chunks), "tokens_indexed": tokens},
            {
                "corpus": corpus,
                "ms": _ms(started),
                "ingest_event_id": event_id,
                "embedding_model": self._settings.embedding_model,
                "truncated": embedded.truncated,
                "pages": prepared.document.page_count,
            },
        )

    async def _documents_changed(self, corpus: str) -> None:
        """A delete changed the corpus: advertise its new counts, and tell the node's listeners."""
        await self._announce_corpus(corpus)
        self._changed(corpus)

    def _changed(self, corpus: str) -> None:
        """Tell the node a corpus's documents changed (the personal corpus has no event to say it)."""
        if self._corpus_changed is None:
            return
        try:
            self._corpus_changed(corpus)
        except Exception:  # a listener's bug must not fail a stored document
            log.exception("corpus_listener_failed", corpus=corpus)

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

    async def _read_and_embed(
        self,
        doc_cid: str,
        *,
        title: str,
        language: str | None,
        filename: str | None,
        metadata: dict[str, Any],
        max_tokens: int,
        progress: Progress | None,
        max_text_bytes: int | None = MAX_TEXT_BYTES,
    ) -> tuple[PreparedDocument, EmbeddedDocument]:
        """Read and chunk a stored blob in a worker while its first chunks are already embedded.

        The worker hands each page's chunks over a buffer of ``PAGES_AHEAD``
        pages, so reading (pypdf: ~30 ms a page here) overlaps embedding instead
        of preceding it or waiting between embed calls; the document's bytes
        never reach the event loop.
        """
        send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)
        result: list[PreparedDocument] = []

        def read() -> None:
            doc = StreamedDocument(
                self._blobs.read_blob(doc_cid),
                doc_cid=doc_cid,
                title=title,
                language=language,
                max_tokens=max_tokens,
                filename_hint=filename,
                extra_metadata=metadata,
                max_text_bytes=max_text_bytes,
            )
            # Closed at once however this ends, so the reader's pypdf warning capture ends with it.
            with contextlib.closing(doc.chunk_groups()) as groups:
                while True:
                    with self._parse_slot:  # one page's parsing at a time across ingests
                        group = next(groups, None)
                    if group is None:
                        break
                    anyio.from_thread.run(send.send, group)  # may wait for the embedder: no slot held
            result.append(doc.prepared())

        async def reader() -> None:
            async with send:
                try:
                    await run_blocking(read, limiter=self._reader_limiter)
                except anyio.BrokenResourceError:
                    return  # the embedding side failed and stopped listening: its error is reported

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                async with receive:
                    embedded = await embed_streamed(self._embedder, receive, progress)
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        return result[0], embedded

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

    async def _emit(self, corpus: str, doc_cid: str, title: str, language: str, chunks: int) -> str:
        if corpus == PERSONAL:
            return ""  # the personal corpus is never announced to the community
        data = {
            "corpus": corpus,
            "doc_cid": doc_cid,
            "title": title[:MAX_TITLE],
            "language": language,
            "chunks": chunks,
        }
        return await self._append_event(INGESTED, data)

    # rag.list_corpora ----------------------------------------------------------------
    async def _handle_list(self, ctx: CallContext) -> dict[str, Any]:
        def collect() -> list[dict[str, Any]]:
            out = []
            for name in sorted(self._store.corpora()):
                if name == PERSONAL and not ctx.is_local:
                    continue
                info = self._store.info(name)
                out.append(
                    {
                        "name": info.name,
                        "docs": info.docs,
                        "chunks": info.chunks,
                        "size_bytes": info.size_bytes,
                        "language_majority": info.language_majority,
                        "embedding_model": info.embedding_model,
                        "served": info.embedding_model == self._settings.embedding_model,
                    }
                )
            return out

        return {"corpora": await run_blocking(collect, limiter=self._read_threads)}

    # rag.list_documents --------------------------------------------------------------
    async def _handle_list_documents(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        """A page of the corpus's documents (by ``doc_cid``); ``next`` continues, ``None`` at the end."""
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        if corpus == PERSONAL and not ctx.is_local:
            raise NotFound("corpus personal is never reachable from another node")
        after, limit = list_input(ctx.input)
        if corpus not in self._registered_corpora:
            raise NotFound(f"corpus {corpus} is not held by this node")
        docs, total = await run_blocking(
            lambda: self._store.list_documents(corpus, after=after, limit=limit + 1),
            limiter=self._read_threads,
        )
        more = len(docs) > limit
        docs = docs[:limit]
        meta: dict[str, Any] = {"corpus": corpus}
        warnings = self._duplicate_warnings(corpus, "this list")
        if warnings:
            meta["warnings"] = warnings
        return {"documents": docs, "total": total, "next": docs[-1]["doc_cid"] if more else None}, meta

    # rag.delete ------------------------------------------------------------------------
    async def _handle_delete(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        """Take a document wholly out of the corpus, announce it, unpin its source.

        Atomic like an ingest (the store's ledger: no query sees it from the
        moment the delete starts, a kill midway is finished at the next
        start), and announced as ``rag.document.deleted`` by this node, the
        host that announced the ingest.  A marker committed with the delete
        keeps the announcement owed until the event is appended, across a kill
        too (:meth:`Deletions.announce_pending`).  Idempotent: deleting a
        document that is gone already answers ``already_deleted`` (and appends
        the event if the document is still announced).
        """
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        if corpus == SYSTEM:
            raise BadRequest("corpus system is read-only")
        if corpus == PERSONAL and not ctx.is_local:
            raise Unauthorized("corpus personal only takes deletions from this node itself")
        doc_cid = delete_input(ctx.input)
        if corpus != PERSONAL:
            await self._check_own_trust("announce deletions")
        # not during a reindex of the corpus (it rebuilds from the ledger's list), nor beside an
        # ingest of the same document
        async with (
            self._gate.ingest(corpus, undone="nothing was deleted: delete"),
            self._doc_lock(corpus, doc_cid),
        ):
            return await self._delete(started, corpus, doc_cid)

    async def _delete(
        self, started: float, corpus: str, doc_cid: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        done = await self._deletions.delete(corpus, doc_cid)
        self.deletes += 1
        log.info("rag_deleted", corpus=corpus, doc_cid=doc_cid, chunks=done.chunks_removed, ms=_ms(started))
        return {"doc_cid": doc_cid, "chunks_removed": done.chunks_removed}, {
            "corpus": corpus,
            "ms": _ms(started),
            "delete_event_id": done.event_id,
            "already_deleted": done.already_deleted,
        }

    # rag.reindex ------------------------------------------------------------------------
    async def _handle_reindex(self, ctx: CallContext) -> dict[str, Any]:
        """Re-embed a corpus from its source blobs and replace it, with ingests into it held off.

        Ingests running when it starts are waited for (a ``wait`` progress frame
        says how many); new ones are refused until it is done (see ``gate.py``).
        """
        corpus = validate_corpus_name(ctx.input.get("corpus"))
        held = await run_blocking(self._store.corpora, limiter=self._read_threads)
        if corpus not in held:
            hosts = [h for h in await self._known_hosts(corpus) if h["hosting"]]
            if hosts:
                where = " and ".join(host_label(h["node"], h.get("node_name")) for h in hosts)
                raise NotFound(
                    f"corpus {corpus} is not on this node: it is hosted on {where}: "
                    f"run 'hearthnet rag reindex --corpus {corpus}' there"
                )
            raise NotFound(
                f"no corpus {corpus} on this node or in the community ('hearthnet corpora' lists them)"
            )

        async def waiting(ingests: int) -> None:
            await ctx.send({"stage": "wait", "current": 0, "total": ingests})

        async with self._gate.reindex(corpus, waiting) as progress:
            docs = await self._reindex(ctx, corpus, progress)
        return {"corpus": corpus, "docs": docs, "embedding_model": self._settings.embedding_model}

    async def _reindex(self, ctx: CallContext, corpus: str, progress: Reindexing) -> int:
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
        max_tokens = self._embedder.max_tokens()
        progress.total = len(docs)
        prepared_docs = []
        for i, doc in enumerate(docs):
            prepared, embedded = await self._read_and_embed(
                doc["doc_cid"],
                title=str(doc["title"]),
                language=doc["language"],
                filename=doc["filename"],  # so its chunks keep their doc_filename
                metadata=doc["metadata"],  # what the caller gave at ingest: filters on it keep working
                max_tokens=max_tokens,
                progress=None,
                max_text_bytes=None,  # it was accepted once (perhaps before the cap): take it again
            )
            prepared_docs.append((prepared.chunks, embedded.vectors))
            progress.done = i + 1
            await ctx.send({"stage": "reindex", "current": i + 1, "total": len(docs)})
        dim = int(prepared_docs[0][1].shape[1])
        with anyio.CancelScope(shield=True):  # the swap and the new registration go together
            await run_blocking(
                lambda: self._store.replace_corpus(
                    corpus, embedding_model=self._settings.embedding_model, dim=dim, documents=prepared_docs
                ),
                limiter=self._store_limiter,
            )
            # The registry removes a registration by its exact params (which name the old model):
            # the announce replaces them with the new model's.
            await self._announce_corpus(corpus)
            self._changed(corpus)
        return len(docs)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


__all__ = ["RagService", "RagSettings"]
