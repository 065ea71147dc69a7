"""What this node offers for its corpora, kept current: ``rag.query``, ``rag.get``,
``rag.list_documents``, ``rag.delete`` and ``rag.update`` registered once per corpus, and ``rag.ingest``
advertising the corpora it hosts.

The per-corpus params carry the corpus's ``docs`` and ``chunks``: the predicates match on
``corpus`` alone, and callers try the host advertising more chunks first
(:data:`hearthnet.contracts.rag.PREFERENCES`), so a second, smaller copy of a name never wins.
``personal`` is registered local-only (never advertised, refused to remote callers).  After
every ingest, delete and reindex the corpus is announced again with its new counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from hearthnet.bus.api import BusAPI
from hearthnet.bus.descriptors import CapabilityDescriptor, Handler, Registration
from hearthnet.contracts.levels import trust_required
from hearthnet.contracts.rag import BY_CORPUS, MAX_K, QUERY, REPLICA_OF, UPDATE, announced
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.store import CorpusRecord, CorpusStore

__all__ = ["QUERY_CONCURRENCY", "CorpusOffers", "Handlers", "corpus_offer"]

QUERY_CONCURRENCY = 256
"""``rag.query`` calls a corpus admits at once by default (``rag.query_max_concurrent``): a waiting
query costs little (its question waits for the next embedding call, :mod:`.search.query_embedder`), and
the more wait, the fuller that call."""


def corpus_offer(
    capability: str,
    handler: Handler,
    *,
    params: dict[str, Any],
    concurrent: int,
    timeout: float,
    description: str,
    local_only: bool = False,
    streaming: bool = False,
) -> Registration:
    """``capability`` of the one corpus its ``params`` name: idempotent, routed by corpus
    (``BY_CORPUS``), at the level the contract gives it (:func:`trust_required`)."""
    return Registration(
        CapabilityDescriptor(
            capability,
            (1, 0),
            params=params,
            trust_required=trust_required(capability),
            max_concurrent=concurrent,
            timeout_seconds=timeout,
            idempotent=True,
            streaming=streaming,
            local_only=local_only,
            description=description,
        ),
        handler,
        BY_CORPUS,
    )


@dataclass(frozen=True)
class Handlers:
    """The service's handlers, one per capability it registers."""

    query: Handler
    get: Handler
    list_documents: Handler
    delete: Handler
    ingest: Handler
    list_corpora: Handler
    reindex: Handler
    update: Handler | None = None
    """``rag.update`` (registered per corpus beside ``rag.delete``; ``None``: not offered)."""


@dataclass(kw_only=True, eq=False)
class CorpusOffers:
    """The registrations of one RAG service (only the event loop touches it)."""

    bus: BusAPI
    store: CorpusStore
    threads: WorkerThreads
    handlers: Handlers
    embedding_model: str
    accept_new_corpora: bool
    query_timeout_seconds: float
    query_max_concurrent: int = QUERY_CONCURRENCY
    replica_params: Callable[[str], dict[str, Any]] | None = None
    """A replicated corpus's ``replica_of`` and ``behind`` (in its query and listing params)."""
    more: Callable[[str], list[Registration]] | None = None
    """Further per-corpus registrations of an announced corpus (``rag.export``)."""
    ingest_max_concurrent: int = 2
    _lock: anyio.Lock = field(default_factory=anyio.Lock, init=False)
    _queries: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    """corpus -> the params of its ``rag.query`` registration (the registry removes by them)."""
    _others: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict, init=False)
    """corpus -> capability -> params of its other per-corpus registrations."""
    _ingest_params: dict[str, Any] | None = field(default=None, init=False)

    def query_params(self, corpus: str) -> dict[str, Any] | None:
        """The params ``rag.query`` of ``corpus`` is registered with, if it is."""
        return self._queries.get(corpus)

    def corpora(self) -> list[str]:
        """The corpora registered now."""
        return list(self._queries)

    def registrations(self) -> list[Registration]:
        """Everything to register at start (reads the store: before the node serves anything)."""
        corpora = self.store.corpora()
        regs = [self._ingest(corpora), self._list_corpora(), self._reindex()]
        for corpus in corpora:
            regs.extend(self._of_corpus(self.store.info(corpus)))
        return regs

    async def announce(self, corpus: str) -> None:
        """Register ``corpus`` again with its new counts (or model), and ``rag.ingest`` with the new
        list of hosted corpora.

        The store is read in a worker thread: its lock may be held for a while by a
        write (a reindex's swap, a ChromaDB server call), and the event loop must never
        wait for it.  One announce at a time, each reading the store inside: two
        resuming in the other order would register the older corpus list last.
        """

        def read() -> tuple[CorpusRecord, list[str]]:
            return self.store.info(corpus), self.store.corpora()

        async with self._lock:
            record, held = await run_blocking(read, limiter=self.threads)
            self._withdraw(corpus)  # the old counts (or model): in the same event-loop step
            for registration in self._of_corpus(record):
                self.bus.register(registration)
            if self._ingest_params is not None:
                self.bus.unregister("rag.ingest", self._ingest_params)
            self.bus.register(self._ingest(held))

    async def withdraw(self, corpus: str) -> None:
        """Stop offering ``corpus`` (a replica given up), and ``rag.ingest`` without it."""
        async with self._lock:
            self._withdraw(corpus)
            held = [c for c in await run_blocking(self.store.corpora, limiter=self.threads) if c != corpus]
            if self._ingest_params is not None:
                self.bus.unregister("rag.ingest", self._ingest_params)
            self.bus.register(self._ingest(held))

    def _withdraw(self, corpus: str) -> None:
        """Remove the corpus's registrations (by their exact params, as the registry needs)."""
        query = self._queries.pop(corpus, None)
        if query is not None:
            self.bus.unregister("rag.query", query)
        for capability, params in self._others.pop(corpus, {}).items():
            self.bus.unregister(capability, params)

    def _of_corpus(self, record: CorpusRecord) -> list[Registration]:
        """``rag.query``, ``rag.list_documents`` and ``rag.delete`` of one corpus."""
        corpus = record.name
        replica = self.replica_params(corpus) if self.replica_params is not None else {}
        size = {"docs": record.docs, "chunks": record.chunks, **replica}
        query = {"corpus": corpus, "embedding_model": record.embedding_model, "k_max": MAX_K, **size}
        listing = {"corpus": corpus, **size}
        reads = {"corpus": corpus, "embedding_model": record.embedding_model, **size}
        delete = {"corpus": corpus}
        self._queries[corpus] = query
        self._others[corpus] = {"rag.list_documents": listing, "rag.get": reads, "rag.delete": delete}
        if self.handlers.update is not None:
            self._others[corpus][UPDATE] = dict(delete)
        local_only = not announced(corpus)
        more = self.more(corpus) if self.more is not None and not local_only else []
        for registration in more:
            self._others[corpus][registration.descriptor.name] = dict(registration.descriptor.params)
        h = self.handlers
        if h.update is not None:
            more = [*more, self._update(corpus, h.update, local_only)]
        offered = (  # capability, handler, params, calls at once, timeout, what it does
            (QUERY, h.query, query, self.query_max_concurrent, self.query_timeout_seconds, "search corpus"),
            ("rag.get", h.get, reads, 8, 30.0, "read chunks of corpus"),
            ("rag.list_documents", h.list_documents, listing, 8, 10.0, "documents of corpus"),
            ("rag.delete", h.delete, delete, 2, 300.0, "delete a document of corpus"),
        )
        return [
            *more,
            *(
                corpus_offer(
                    name,
                    handler,
                    params=params,
                    concurrent=concurrent,
                    timeout=timeout,
                    description=f"{what} {corpus}",
                    local_only=local_only,
                )
                for name, handler, params, concurrent, timeout, what in offered
            ),
        ]

    @staticmethod
    def _update(corpus: str, handler: Handler, local_only: bool) -> Registration:
        return corpus_offer(
            UPDATE,
            handler,
            params={"corpus": corpus},
            concurrent=2,
            timeout=300.0,
            description=f"change a document's title and metadata in corpus {corpus}",
            local_only=local_only,
        )

    def _ingest(self, held: Sequence[str]) -> Registration:
        replica = self.replica_params or (lambda _corpus: {})
        self._ingest_params = {  # a replica's corpora take no ingest here: not listed
            "corpora": sorted(c for c in held if announced(c) and not replica(c)),
            "accepts_new": self.accept_new_corpora,
            "embedding_model": self.embedding_model,
        }
        descriptor = CapabilityDescriptor(
            "rag.ingest",
            (1, 0),
            params=self._ingest_params,
            trust_required=trust_required("rag.ingest"),
            max_concurrent=self.ingest_max_concurrent,
            timeout_seconds=900.0,
            idempotent=True,
            streaming=True,
        )
        return Registration(descriptor, self.handlers.ingest)

    def _list_corpora(self) -> Registration:
        return Registration(
            CapabilityDescriptor(
                "rag.list_corpora", (1, 0), max_concurrent=8, timeout_seconds=10.0, idempotent=True
            ),
            self.handlers.list_corpora,
        )

    def _reindex(self) -> Registration:
        return Registration(
            CapabilityDescriptor(
                "rag.reindex",
                (1, 0),
                timeout_seconds=3600.0,
                local_only=True,
                streaming=True,
                max_concurrent=1,
            ),
            self.handlers.reindex,
        )

    def duplicate_warnings(self, corpus: str, what: str) -> list[str]:
        """A warning when other nodes host a corpus of the same name (made before names were
        checked, or by two nodes creating it at once): ``what`` covers only this node's copy."""
        if not announced(corpus):
            return []
        others = [
            p
            for p in self.bus.providers(QUERY, (1, 0), {"corpus": corpus})
            if not p.is_local and not p.descriptor.params.get(REPLICA_OF)
        ]
        if not others:
            return []
        own = (self.query_params(corpus) or {}).get("chunks", "?")
        elsewhere = ", ".join(
            f"{p.node_id} ({p.descriptor.params.get('chunks', '?')} chunks)" for p in others
        )
        return [
            f"corpus {corpus} is hosted on {len(others) + 1} nodes (one name, separate copies): {what} "
            f"covers only the copy on {self.bus.node_id} ({own} chunks); also on {elsewhere}"
        ]
