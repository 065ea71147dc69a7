"""``rag.query``, ``rag.ingest``, ``rag.list_corpora``, ``rag.list_documents``, ``rag.delete``,
``rag.update`` (and ``rag.reindex``, this node only): the handlers, each checking its input and the
corpus's rules, then handing over to the route of its data — :mod:`.ingest` (read, chunk, embed,
write, announce), :mod:`.deletion`, :mod:`.update`, and the store's corpora searched through
:class:`~.store.LocalCorpus`.

What the node offers per corpus is kept current by :mod:`.offers`.  ``personal`` is never
reachable from another node; ``system`` is read-only.  A corpus whose recorded model differs
from this node's embedding model is not served: its ``rag.query`` answers ``not_found`` with the
reindex command.  A corpus name is one corpus in the community: creating one that another node
hosts is refused.  The configured archives (external ChromaDB collections) are served beside
the store's corpora by :mod:`.archives.serve`: read-only, every write to one ``bad_request``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.blobs import BlobStore
from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import Registration
from hearthnet.config.archives import ArchiveConfig
from hearthnet.contracts.embed import Embedder
from hearthnet.contracts.rag import (
    PERSONAL,
    RagClient,
    announced,
    check_reachable,
    check_writable,
    embedded_with_another,
    host_label,
    validate_corpus_name,
)
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.announce import AppendEvent, AppendEvents, FindEvent
from hearthnet.services.rag.archives.serve import ServedArchives
from hearthnet.services.rag.deletion import Deletions
from hearthnet.services.rag.gate import CorpusGate, DocumentLocks
from hearthnet.services.rag.ingest.flow import Ingestion
from hearthnet.services.rag.ingest.isolated import DocumentReaders
from hearthnet.services.rag.ingest.unstored import read_document_registration
from hearthnet.services.rag.inputs import (
    IngestInput,
    delete_input,
    ingest_batch_input,
    ingest_input,
    list_input,
    query_input,
)
from hearthnet.services.rag.low_text import demoted, kept_by_words, wider
from hearthnet.services.rag.offers import QUERY_CONCURRENCY, CorpusOffers, Handlers
from hearthnet.services.rag.reads import ChunkReads
from hearthnet.services.rag.replicas.announce import DigestedAppends
from hearthnet.services.rag.replicas.export import ExportServer
from hearthnet.services.rag.replicas.follower import Follower
from hearthnet.services.rag.replicas.handlers import Replicas, export_registration, replica_meta
from hearthnet.services.rag.replicas.log import ReadView
from hearthnet.services.rag.replicas.policy import ReplicaCap, ReplicaPolicy
from hearthnet.services.rag.replies import document_page, query_reply
from hearthnet.services.rag.search.filters import filter_keys
from hearthnet.services.rag.search.query_embedder import QueryEmbedder
from hearthnet.services.rag.store import CorpusStore, LocalCorpus
from hearthnet.services.rag.store.local_corpus import KeywordLeg
from hearthnet.services.rag.trust import OwnLevel, check_own_trust
from hearthnet.services.rag.update import Updates

__all__ = ["RagService", "RagSettings"]

log = structlog.get_logger("hearthnet.rag")

CorpusChanged = Callable[[str], None]
"""Told the corpus name after this node changed its documents (the personal corpus included)."""
Output = tuple[dict[str, Any], dict[str, Any]]


@dataclass(frozen=True)
class RagSettings:
    embedding_model: str
    query_timeout_seconds: float = 5.0
    embed_timeout_seconds: float = 10.0
    accept_new_corpora: bool = True
    store_threads: int = 2
    query_max_concurrent: int = QUERY_CONCURRENCY
    replicas: tuple[str, ...] = ()  # corpora to hold replicas of ([[rag.replicas]])
    max_replicas: int | None = None  # replicas each corpus this node hosts may have (None: no cap)
    ingest_max_concurrent: int = 2


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
        archives: Sequence[ArchiveConfig] = (),
        append_events: AppendEvents | None = None,
        corpus_view: ReadView | None = None,
    ) -> None:
        self._bus = bus
        self._corpus_changed = corpus_changed
        self._store = store
        self._settings = settings
        self._own_level = own_level
        self._embedder = Embedder(bus, settings.embedding_model, settings.embed_timeout_seconds)
        self._query_embedder = QueryEmbedder(self._embedder)
        """Questions of concurrent ``rag.query`` calls embedded together."""
        self._store_limiter = anyio.CapacityLimiter(settings.store_threads)
        """Threads for store writes (and the reads of ingest and reindex)."""
        self._read_threads = WorkerThreads(settings.store_threads, "rag-read")
        """Threads for queries and listings: a query never waits behind a long write."""
        self._readers = DocumentReaders()
        """Documents are read in worker processes that a caller's deadline can stop."""
        self._gate = CorpusGate()
        self._documents = DocumentLocks()
        self._reads = ChunkReads(store, self._read_threads, lambda corpus: self._offers.query_params(corpus))
        digested = DigestedAppends(store, self._read_threads, append_event, append_events)
        append_event, append_events = digested.append_event, digested.append_events
        self._export = ExportServer(
            store,
            self._read_threads,
            admit=ReplicaCap(settings.max_replicas, store.root / "replica_holders.json", bus.node_id).admit,
        )
        self.replicas = (
            None if corpus_view is None else self._replicas(corpus_view, blobs, append_event, own_level)
        )
        self._offers = CorpusOffers(
            bus=bus,
            store=store,
            threads=self._read_threads,
            handlers=Handlers(
                query=self._handle_query,
                get=self._reads.handle_get,
                list_documents=self._handle_list_documents,
                delete=self._handle_delete,
                ingest=self._handle_ingest,
                list_corpora=self._handle_list,
                reindex=self._handle_reindex,
                update=lambda ctx: self._updates.handle(ctx),
            ),
            embedding_model=settings.embedding_model,
            accept_new_corpora=settings.accept_new_corpora,
            query_timeout_seconds=settings.query_timeout_seconds,
            query_max_concurrent=settings.query_max_concurrent,
            replica_params=self.replicas.follower.params if self.replicas is not None else None,
            more=lambda corpus: [export_registration(self._export, corpus)],  # beside rag.query
            ingest_max_concurrent=settings.ingest_max_concurrent,
        )
        self._ingestion, self._deletions = self._flows(blobs, append_event, append_events, find_event)
        locks, limits = (self._gate, self._documents), (self._store_limiter, self._read_threads)
        self._updates = Updates(store, bus.node_id, *locks, *limits, append_event, self._check_own_trust)
        self._updates.hooks(refuse=self._refuse_update, changed=self._changed)
        self._archives = ServedArchives(
            bus=bus,
            configs=archives,
            query_timeout=settings.query_timeout_seconds,
            embed_timeout=settings.embed_timeout_seconds,
        )
        """The configured archives, served read-only beside the store's corpora."""
        self.queries = self.ingests = self.deletes = 0

    def _flows(
        self, blobs: BlobStore, append: AppendEvent, appends: AppendEvents | None, find_event: FindEvent
    ) -> tuple[Ingestion, Deletions]:
        """The routes of a document into the store and out of it (``append_event``: digested)."""
        deletions = Deletions(
            store=self._store,
            blobs=blobs,
            node_id=self._bus.node_id,
            store_limiter=self._store_limiter,
            read_threads=self._read_threads,
            append_event=append,
            find_event=find_event,
            counts_changed=self._documents_changed,
        )
        ingestion = Ingestion(
            bus=self._bus,
            store=self._store,
            blobs=blobs,
            embedder=self._embedder,
            offers=self._offers,
            append_event=append,
            append_events=appends,
            find_event=find_event,
            changed=self._changed,
            store_limiter=self._store_limiter,
            read_threads=self._read_threads,
            readers=self._readers,
            announce_deletions=deletions.announce_pending,
        )
        return ingestion, deletions

    def _replicas(
        self, view: ReadView, blobs: BlobStore, append_event: AppendEvent, own_level: OwnLevel
    ) -> Replicas:
        """The replicas this node holds, following their hosts' logs (``append_event``: digested)."""
        follower = Follower(
            bus=self._bus,
            store=self._store,
            view=view,
            policy=ReplicaPolicy(self._settings.replicas, self._store.root / "replicas.json"),
            embedder=self._embedder,
            store_limiter=self._store_limiter,
            read_threads=self._read_threads,
            announce=self._replica_changed,
            forget=lambda corpus: self._replica_changed(corpus, dropped=True),
            pin=blobs.pin,
        )
        return Replicas(
            bus=self._bus,
            follower=follower,
            export=self._export,
            view=view,
            own_level=own_level,
            append_event=append_event,
            threads=self._read_threads,
        )

    async def _replica_changed(self, corpus: str, dropped: bool = False) -> None:
        await (self._offers.withdraw(corpus) if dropped else self._offers.announce(corpus))
        self._changed(corpus)

    def events_stored(self) -> None:
        """New events arrived (or a peer came up): the replicas look at the log again."""
        if self.replicas is not None:
            self.replicas.follower.wake()

    async def run_background(self) -> None:
        """The replicas' follower, for as long as the node runs."""
        if self.replicas is not None:
            await self.replicas.follower.run()

    # Service protocol ---------------------------------------------------------------
    async def start(self) -> None:
        recovered = await run_blocking(self._store.recover, limiter=self._store_limiter)
        if any(recovered.values()):
            log.warning("partial_documents_removed", corpora={k: v for k, v in recovered.items() if v})
        # A corpus from before the keyword index gets it now (from ChromaDB), before queries come.
        built = await run_blocking(self._store.build_keywords, limiter=self._store_limiter)
        if built:
            log.info("keyword_indexes_built", corpora=built)
        # Small corpora are searched exactly from memory: load them now, not on the first query.
        await run_blocking(self._store.warm_exact, limiter=self._store_limiter)
        await self._deletions.announce_pending()
        await self._updates.announce_pending()
        if self.replicas is not None:
            await self.replicas.follower.load()

    async def stop(self) -> None:
        self._readers.close()
        await self._archives.aclose()
        await anyio.to_thread.run_sync(self._store.close)
        self._read_threads.close()

    def registrations(self) -> list[Registration]:
        """What the node registers at start (reads the store: before the node serves anything)."""
        mine = self.replicas.registrations() if self.replicas is not None else []
        archives = self._archives.registrations(self._store.corpora())
        read = read_document_registration(self._readers, self._embedder)  # a chat's attachments
        return [*self._offers.registrations(), *archives, *mine, read]

    def health(self) -> dict[str, Any]:
        """Served to peers by ``node.stats``: the personal corpus is never named."""
        return {
            "corpora": sorted(c for c in self._offers.corpora() if announced(c)),
            "queries": self.queries,
            "ingests": self.ingests,
            "deletes": self.deletes,
            "embedding_model": self._settings.embedding_model,
            "archives": self._archives.health(),
            "replicas": self.replicas.health() if self.replicas is not None else [],
            "exports": self._export.served,
        }

    def _corpus(self, name: str, embedding_model: str) -> LocalCorpus:
        return LocalCorpus(self._store, name, self._read_threads, embedding_model=embedding_model)

    async def _documents_changed(self, corpus: str) -> None:
        """A delete changed the corpus: advertise its new counts, and tell the node's listeners."""
        await self._offers.announce(corpus)
        self._changed(corpus)

    def _changed(self, corpus: str) -> None:
        """Tell the node a corpus's documents changed (the personal corpus has no event to say it)."""
        if self._corpus_changed is None:
            return
        try:
            self._corpus_changed(corpus)
        except Exception:  # a listener's bug must not fail a stored document
            log.exception("corpus_listener_failed", corpus=corpus)

    # rag.query ----------------------------------------------------------------------
    async def _handle_query(self, ctx: CallContext) -> Output:
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_reachable(corpus, is_local=ctx.is_local)
        q = query_input(ctx.input)
        query, k, where, include_text, mode = q.text, q.k, q.where, q.include_text, q.mode
        registered = self._offers.query_params(corpus)
        if registered is None:
            raise NotFound(f"corpus {corpus} is not held by this node")
        model = str(registered["embedding_model"])
        if model != self._settings.embedding_model:
            raise embedded_with_another(corpus, model, self._settings.embedding_model)
        local = self._corpus(corpus, model)
        leg: list[KeywordLeg] = []
        failed: list[BusError] = []  # raised after the task group, as themselves (not a group)

        async def keyword_leg() -> None:  # needs no vector: runs while the query is embedded
            try:
                leg.append(await local.keyword_leg(query, k=wider(k), mode=mode, where=where))
            except BusError as exc:
                failed.append(exc)

        embedding = time.perf_counter()
        async with anyio.create_task_group() as tg:
            if mode != "dense":
                tg.start_soon(keyword_leg)
            try:
                vector = q.embedding if q.embedding is not None else await self._query_embedder.embed(query)
            except BusError as exc:
                tg.cancel_scope.cancel()
                failed.insert(0, exc)
            embedded = time.perf_counter()
        if failed:
            raise failed[0]
        hits, known_keys, used = await local.search(
            vector,
            k=wider(k),
            where=where,
            include_text=include_text,
            text=query,
            mode=mode,
            leg=leg[0] if leg else None,
        )
        kept = kept_by_words(used, query, leg[0].rows if leg else None)
        hits = demoted(hits, k, kept=kept)  # chunks of pages with almost no text below content
        warnings = self._duplicate_warnings(corpus, "this answer")
        replica, lag = replica_meta(self._bus.node_id, corpus, registered)  # a replica's lag, if any
        warnings += lag
        warnings += _query_warnings(corpus, mode, used, where, known_keys)
        self.queries += 1
        out, meta = query_reply(
            ctx,
            hits,
            q,
            corpus=corpus,
            mode=used,
            started=started,
            embed_seconds=embedded - embedding,
            model=model,
        )
        if used != mode:
            meta["mode_requested"] = mode
        meta.update(replica)
        if warnings:
            meta["warnings"] = warnings
        return out, meta

    def _duplicate_warnings(self, corpus: str, what: str) -> list[str]:
        """Warnings when other nodes host a corpus of the same name (a replica's copy is the host's)."""
        replica = self.replicas is not None and bool(self.replicas.follower.host_of(corpus))
        return [] if replica else self._offers.duplicate_warnings(corpus, what)

    # rag.ingest ---------------------------------------------------------------------
    async def _handle_ingest(self, ctx: CallContext) -> Output:
        started = time.perf_counter()
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_writable(corpus, is_local=ctx.is_local, what="documents")
        self._archives.refuse_write(corpus, "ingest into")
        if self.replicas is not None:
            self.replicas.refuse_write(corpus, "documents")
        batch = ingest_batch_input(ctx.input)
        inp = ingest_input(ctx.input) if batch is None else None
        if announced(corpus):  # personal is never announced, so it needs no trust
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
        if batch is not None:
            return await self._ingest_batch(ctx, started, corpus, batch)
        assert inp is not None
        # one ingest (or delete) of a document at a time; a repeat finds it stored
        async with self._gate.ingest(corpus), self._documents.hold(corpus, inp.doc_cid):
            output, meta = await self._ingestion.ingest(ctx, started, corpus, inp)
        if meta.get("existing"):  # kept as stored: say what differs from this ingest's values
            await self._updates.note_kept(corpus, [inp], [output])
        self.ingests += not meta.get("existing")
        return output, meta

    async def _ingest_batch(
        self, ctx: CallContext, started: float, corpus: str, batch: list[IngestInput]
    ) -> Output:
        """``rag.ingest {documents}``: every document held (in one order, so two batches cannot
        deadlock), then read, embedded and written together, each answered on its own."""
        async with AsyncExitStack() as held:
            await held.enter_async_context(self._gate.ingest(corpus))
            for doc_cid in sorted(d.doc_cid for d in batch):
                await held.enter_async_context(self._documents.hold(corpus, doc_cid))
            output, meta = await self._ingestion.ingest_many(ctx, started, corpus, batch)
        await self._updates.note_kept(corpus, batch, output["documents"])
        self.ingests += sum(1 for d in output["documents"] if d["ok"] and not d["existing"])
        return output, meta

    def _refuse_update(self, corpus: str) -> None:
        self._archives.refuse_write(corpus, "update documents of")
        if self.replicas is not None:
            self.replicas.refuse_write(corpus, "metadata changes")

    async def _check_own_trust(self, what: str) -> None:
        await check_own_trust(self._own_level, self._bus.node_id, self._read_threads, what)

    async def _known_hosts(self, corpus: str) -> list[dict[str, Any]]:
        """The hosts of ``corpus`` that ``rag.known_corpora`` (this node's catalog) knows of."""
        try:
            known = await RagClient(self._bus).known_corpora(corpus, provider=self._bus.node_id, timeout=10.0)
        except NotFound:
            return []  # a bus without the catalog (a test's): nothing known beyond this node
        return [h for c in known for h in c.get("hosts", [])]

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

    # rag.list_corpora ----------------------------------------------------------------
    async def _handle_list(self, ctx: CallContext) -> dict[str, Any]:
        def collect() -> list[dict[str, Any]]:
            out = []
            for name in sorted(self._store.corpora()):
                if not announced(name) and not ctx.is_local:
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

        local = await run_blocking(collect, limiter=self._read_threads)
        return {"corpora": [*local, *await self._archives.list_entries()]}

    # rag.list_documents --------------------------------------------------------------
    async def _handle_list_documents(self, ctx: CallContext) -> Output:
        """A page of the corpus's documents (by ``doc_cid``); ``next`` continues, ``None`` at the end."""
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_reachable(corpus, is_local=ctx.is_local)
        after, limit = list_input(ctx.input)
        if self._offers.query_params(corpus) is None:
            raise NotFound(f"corpus {corpus} is not held by this node")
        docs, total = await run_blocking(
            lambda: self._store.list_documents(corpus, after=after, limit=limit + 1),
            limiter=self._read_threads,
        )
        docs, more = document_page(docs, limit)
        meta: dict[str, Any] = {"corpus": corpus}
        warnings = self._duplicate_warnings(corpus, "this list")
        if warnings:
            meta["warnings"] = warnings
        return {"documents": docs, "total": total, "next": docs[-1]["doc_cid"] if more else None}, meta

    # rag.delete ------------------------------------------------------------------------
    async def _handle_delete(self, ctx: CallContext) -> Output:
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
        check_writable(corpus, is_local=ctx.is_local, what="deletions")
        if self.replicas is not None:
            self.replicas.refuse_write(corpus, "deletions")
        doc_cid = delete_input(ctx.input)
        if announced(corpus):
            await self._check_own_trust("announce deletions")
        # not during a reindex of the corpus (it rebuilds from the ledger's list), nor beside an
        # ingest of the same document
        async with (
            self._gate.ingest(corpus, undone="nothing was deleted: delete"),
            self._documents.hold(corpus, doc_cid),
        ):
            done = await self._deletions.delete(corpus, doc_cid)
        self.deletes += 1
        log.info("rag_deleted", corpus=corpus, doc_cid=doc_cid, chunks=done.chunks_removed, ms=_ms(started))
        return done.output(doc_cid), {
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
        self._archives.refuse_write(corpus, "reindex")
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
            docs = await self._ingestion.reindex(ctx, corpus, progress)
        return {"corpus": corpus, "docs": docs, "embedding_model": self._settings.embedding_model}


def _query_warnings(
    corpus: str, mode: str, used: str, where: Mapping[str, Any] | None, known_keys: frozenset[str] | None
) -> list[str]:
    """What a query's caller is told besides its hits: a keyword or hybrid query answered densely
    (no keyword index yet), a filter naming a metadata field no document has."""
    warnings = []
    if used != mode:
        warnings.append(
            f"corpus {corpus} has no keyword index yet (it is built when the node starts): "
            f"this {mode} query was answered by dense search alone"
        )
    if where and known_keys is not None:
        for key in sorted(filter_keys(where) - known_keys):
            warnings.append(
                f"no document of corpus {corpus} has the metadata field {key!r} (misspelled?): "
                f"the filter cannot match on it; its fields are {', '.join(sorted(known_keys))}"
            )
    return warnings


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
