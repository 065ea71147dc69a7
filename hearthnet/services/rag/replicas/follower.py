"""The follower: makes this node's copy of each replicated corpus what the host's signed events say.

For each corpus it follows (its owner's policy, and a corpus moved away from this node), it derives
from the log the host's documents in effect (:mod:`.log`), removes what the host deleted, copies
what the host ingested, in log order, and gives each document the title and metadata of the host's
latest update of it (in place, no copy): the chunks, metadata and vectors by ``rag.export`` from any node
that holds them, checked against the event's digest (:mod:`.export`), the source by ``file.fetch`` so
a citation opens the PDF, then written with the store's one atomic write (``add_document``: a kill
midway leaves nothing, and the next start copies it again).  No embedding unless this node runs
another model than the one the event names: then the chunks are embedded here.

It runs again whenever events arrive or a peer comes up, and after a failed copy later, by itself.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import numpy as np
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.contracts.embed import MAX_TEXTS, Embedder
from hearthnet.contracts.file import FileClient
from hearthnet.contracts.rag import BEHIND, EXPORT, REPLICA_OF
from hearthnet.errors import BusError, NotFound
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.replicas.export import Exported, IngestFacts, fetch_export, is_refusal
from hearthnet.services.rag.replicas.log import CorpusView, ReadView
from hearthnet.services.rag.replicas.policy import ReplicaPolicy
from hearthnet.services.rag.store import CorpusStore
from hearthnet.services.rag.store.write import DocumentSource

__all__ = ["Follower", "ReplicaState"]

log = structlog.get_logger("hearthnet.rag.replicas")

RETRY_SECONDS = (2.0, 5.0, 15.0, 30.0, 60.0)
"""After a copy failed (no node serving it online, a refused copy), the next try by itself."""
COPY_TIMEOUT_FLOOR = 30.0
"""Seconds a document's copy may take at least; more for a larger one (``SECONDS_PER_CHUNK``)."""
SECONDS_PER_CHUNK = 0.05
PUBLISH_SECONDS = 1.0
"""During a pass, a replica registers its new counts and lag at most this often (and at its end)."""


@dataclass
class ReplicaState:
    """One followed corpus, as ``status``, ``corpora`` and the replica's ``rag.query`` params show it."""

    corpus: str
    host: str | None = None
    behind: int = 0
    held: int = 0
    last_applied: float | None = None
    error: str | None = None
    copied: int = 0
    bytes_received: int = 0
    sources: dict[str, int] = field(default_factory=dict)
    pass_seconds: float | None = None
    """How long the last pass that copied something took, from reading the log to the last write."""

    def json(self) -> dict[str, Any]:
        """As ``status`` shows it: ``held`` as ``docs``, without the per-node ``sources``."""
        out = asdict(self)
        out["docs"] = out.pop("held")
        del out["sources"]
        return out


Announce = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Fetched:
    """A document copied and checked, ready to write (``vectors`` of this node's ``model``)."""

    exported: Exported
    vectors: np.ndarray
    model: str
    seconds: float


class Follower:
    """Keeps this node's replicas current (one corpus at a time, one document at a time)."""

    def __init__(
        self,
        *,
        bus: BusAPI,
        store: CorpusStore,
        view: ReadView,
        policy: ReplicaPolicy,
        embedder: Embedder,
        store_limiter: anyio.CapacityLimiter,
        read_threads: WorkerThreads,
        announce: Announce,
        forget: Announce,
        pin: Callable[[str], None],
    ) -> None:
        self._bus = bus
        self._store = store
        self._view = view
        self.policy = policy
        self._embedder = embedder
        self._store_limiter = store_limiter
        self._read_threads = read_threads
        self._announce = announce
        self._forget = forget
        self._pin = pin
        """Keeps a copied document's source blob (blocking)."""
        self.states: dict[str, ReplicaState] = {}
        """Corpora this node holds as a replica now (its host another node)."""
        self._wake = anyio.Event()
        self._locks: dict[str, anyio.Lock] = {}
        self._published: dict[str, float] = {}
        self._failures = 0
        self.synced = anyio.Event()
        """Set after each pass over every followed corpus (tests and the CLI wait on it)."""

    # what the service asks ------------------------------------------------------------------
    def params(self, corpus: str) -> dict[str, Any]:
        """Extra ``rag.query`` params of a replicated corpus (none for a corpus this node hosts)."""
        state = self.states.get(corpus)
        if state is None or state.host is None:
            return {}
        return {REPLICA_OF: state.host, BEHIND: state.behind}

    def host_of(self, corpus: str) -> str | None:
        """The host of ``corpus`` when this node holds only a replica of it."""
        state = self.states.get(corpus)
        return None if state is None else state.host

    def wake(self) -> None:
        self._wake.set()

    # the loop -------------------------------------------------------------------------------
    async def load(self) -> None:
        """Before the node registers anything: which held corpora are replicas (no copying yet)."""
        try:
            for corpus in await self._followed():
                view = await run_blocking(self._view, corpus, limiter=self._read_threads)
                if view.host is not None and view.host != self._bus.node_id:
                    held = await run_blocking(self._held, corpus, limiter=self._read_threads)
                    wanted = {f.doc_cid for f in view.documents}
                    self.states[corpus] = ReplicaState(
                        corpus, view.host, behind=len(held ^ wanted), held=len(held)
                    )
        except BusError as exc:  # the loop tries again; a node must start whatever its log says
            log.warning("replica_load_failed", code=exc.code, reason=exc.message[:200])

    async def run(self) -> None:
        while True:
            self._wake = anyio.Event()
            ok = await self.sync_all()
            self.synced.set()
            self.synced = anyio.Event()
            self._failures = 0 if ok else self._failures + 1
            if ok:
                await self._wake.wait()
            else:
                delay = RETRY_SECONDS[min(self._failures, len(RETRY_SECONDS)) - 1]
                with anyio.move_on_after(delay):
                    await self._wake.wait()

    async def _followed(self) -> list[str]:
        """The policy's corpora, and held corpora moved away from this node."""
        wanted = set(self.policy.corpora())
        held = await run_blocking(self._store.corpora, limiter=self._read_threads)
        for corpus in held:
            if corpus in wanted or corpus in self.states:
                continue
            view = await run_blocking(self._view, corpus, limiter=self._read_threads)
            if self._bus.node_id in view.moved_from and view.host != self._bus.node_id:
                wanted.add(corpus)
        return sorted(wanted | set(self.states))

    async def sync_all(self) -> bool:
        """One pass over every followed corpus; ``False`` if something is left to retry."""
        ok = True
        for corpus in await self._followed():
            if not self.policy.wants(corpus) and corpus in self.states:
                moved_away = await run_blocking(self._view, corpus, limiter=self._read_threads)
                if self._bus.node_id not in moved_away.moved_from:
                    await self.give_up(corpus)
                    continue
            try:
                ok = await self.sync(corpus) and ok
            except BusError as exc:
                ok = False
                self._state(corpus).error = f"{exc.code}: {exc.message}"
                log.warning("replica_sync_failed", corpus=corpus, code=exc.code, reason=exc.message[:200])
        return ok

    def _state(self, corpus: str) -> ReplicaState:
        return self.states.setdefault(corpus, ReplicaState(corpus))

    async def sync(self, corpus: str) -> bool:
        """Bring ``corpus`` up to the log; ``False`` if a document could not be copied yet (one pass
        per corpus at a time: ``rag.replicate``'s first pass and the loop's wait for each other)."""
        async with self._locks.setdefault(corpus, anyio.Lock()):
            return await self._sync(corpus)

    async def _sync(self, corpus: str) -> bool:
        started = time.perf_counter()
        view = await run_blocking(self._view, corpus, limiter=self._read_threads)
        if view.host is None:
            self._state(corpus).error = "no document announced yet: nothing to copy"
            return True
        if view.host == self._bus.node_id:  # a move made this node the host: it follows nobody
            if self.states.pop(corpus, None) is not None:
                await self._announce(corpus)
            return True
        state = self._state(corpus)
        state.host = view.host
        held = await run_blocking(self._held, corpus, limiter=self._read_threads)
        wanted = {f.doc_cid for f in view.documents}
        extra = sorted(held - wanted)
        missing = [f for f in view.documents if f.doc_cid not in held]
        state.behind = len(extra) + len(missing)
        state.held = len(held)
        await self._publish(corpus, bool(held))
        for doc_cid in extra:
            await self._remove(corpus, doc_cid)
            state.behind -= 1
            state.held -= 1
            await self._publish(corpus, bool(held), at_most_every=PUBLISH_SECONDS)
        copied = state.copied
        ok = await self._copy_all(state, missing)
        updated = await self._apply_updates(corpus, [f for f in view.documents if f.updated is not None])
        if extra or state.copied > copied or updated:
            await self._publish(corpus, True)  # the pass's last counts and lag, always
        if state.copied > copied:
            state.pass_seconds = round(time.perf_counter() - started, 3)
        if ok:
            state.error = None
        state.last_applied = time.time()
        return ok

    def _held(self, corpus: str) -> set[str]:
        if corpus not in self._store.corpora():
            return set()
        return {str(d["doc_cid"]) for d in self._store.documents(corpus)}

    async def _publish(self, corpus: str, held: bool, *, at_most_every: float = 0.0) -> None:
        """Register the corpus again with the new counts and lag (once it exists here); during a
        pass at most every ``at_most_every`` seconds (each registration goes to every peer)."""
        now = time.monotonic()
        if now - self._published.get(corpus, -math.inf) < at_most_every:
            return
        if held or corpus in await run_blocking(self._store.corpora, limiter=self._read_threads):
            self._published[corpus] = now
            await self._announce(corpus)

    async def _apply_updates(self, corpus: str, documents: list[IngestFacts]) -> int:
        """Give each held document the title and metadata of the host's latest update of it, where
        they differ (no copying, no embedding); returns how many changed."""
        if not documents:
            return 0

        def apply() -> int:
            if corpus not in self._store.corpora():
                return 0
            held = {str(d["doc_cid"]): d for d in self._store.documents(corpus)}
            changed = 0
            for facts in documents:
                doc, new = held.get(facts.doc_cid), facts.updated
                if doc is None or new is None:
                    continue
                name = doc.get("filename") if new.filename is None else new.filename
                if (doc["title"], doc["metadata"], doc.get("filename")) == (new.title, new.metadata, name):
                    continue
                fields = {
                    **dict.fromkeys(k for k in doc["metadata"] if k not in new.metadata),
                    **new.metadata,
                }
                done = self._store.updates.update_document(
                    corpus, facts.doc_cid, metadata=fields, title=new.title, filename=new.filename
                )
                changed += done is not None and done.changed
            return changed

        with anyio.CancelScope(shield=True):
            changed: int = await run_blocking(apply, limiter=self._store_limiter)
        if changed:
            log.info("replica_updated", corpus=corpus, documents=changed)
        return changed

    async def _remove(self, corpus: str, doc_cid: str) -> None:
        with anyio.CancelScope(shield=True):
            await run_blocking(self._store.delete_document, corpus, doc_cid, limiter=self._store_limiter)
        log.info("replica_deleted", corpus=corpus, doc_cid=doc_cid)

    async def _copy_all(self, state: ReplicaState, missing: list[IngestFacts]) -> bool:
        """Copy ``missing`` in log order: the next document is fetched while one is written (one
        ahead at most); ``False`` if one could not be copied (the others still are)."""
        send, receive = anyio.create_memory_object_stream[tuple[IngestFacts, Fetched | BusError]](1)

        async def fetch_all() -> None:
            async with send:
                for facts in missing:
                    try:
                        got: Fetched | BusError = await self._fetch(facts)
                    except BusError as exc:
                        got = exc
                    await send.send((facts, got))

        ok = True
        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(fetch_all)
            async for facts, got in receive:
                if isinstance(got, BusError):
                    ok = False
                    state.error = f"{got.code}: {got.message}"
                    log.warning(
                        "replica_copy_failed", corpus=facts.corpus, doc_cid=facts.doc_cid, code=got.code
                    )
                    continue
                await self._write(state, facts, got)
                state.behind -= 1
                state.held += 1
                await self._publish(facts.corpus, True, at_most_every=PUBLISH_SECONDS)
        return ok

    async def _fetch(self, facts: IngestFacts) -> Fetched:
        """The document's chunks and vectors (checked against its event) and, at the same time, its
        source blob; embedded here only when this node runs another model."""
        started = time.perf_counter()
        timeout = COPY_TIMEOUT_FLOOR + SECONDS_PER_CHUNK * facts.chunks
        got: list[Exported] = []
        failed: list[BusError] = []  # raised after the task group, as themselves (not a group)

        async def blob() -> None:
            try:
                await self._blob(facts, timeout)
            except BusError as exc:
                failed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(blob)
            try:
                got.append(await self._export(facts))
            except BusError as exc:
                tg.cancel_scope.cancel()
                failed.insert(0, exc)
        if failed:
            raise failed[0]
        exported = got[0]
        vectors, model = exported.vectors, exported.embedding_model
        if model != self._embedder.model:  # another model here: embed the same chunks with ours
            vectors = await self._reembed([c.text for c in exported.chunks])
            model = self._embedder.model
        return Fetched(exported, vectors, model, time.perf_counter() - started)

    async def _blob(self, facts: IngestFacts, timeout: float) -> None:
        """The source by ``file.fetch`` (the host first), so a citation opens the PDF here."""
        await FileClient(self._bus).fetch(
            facts.doc_cid, hint=facts.host, provider=self._bus.node_id, timeout=timeout
        )

    async def _write(self, state: ReplicaState, facts: IngestFacts, fetched: Fetched) -> None:
        """The store's one atomic write (as ingest's), then the source pinned."""
        started = time.perf_counter()
        exported, vectors, model = fetched.exported, fetched.vectors, fetched.model
        source = DocumentSource(filename=exported.filename, pages=exported.pages, ingested_by=facts.host)
        dim = int(vectors.shape[1])

        def write() -> None:
            self._store.create_corpus(facts.corpus, embedding_model=model, dim=dim)
            self._store.add_document(facts.corpus, exported.chunks, vectors, source=source)

        with anyio.CancelScope(shield=True):  # once started, the one atomic write finishes
            await run_blocking(write, limiter=self._store_limiter)
        try:
            await run_blocking(self._pin, facts.doc_cid, limiter=self._store_limiter)
        except BusError as exc:
            log.warning("replica_source_not_pinned", doc_cid=facts.doc_cid, code=exc.code)
        state.copied += 1
        state.bytes_received += exported.wire_bytes
        state.sources[exported.source] = state.sources.get(exported.source, 0) + 1
        log.info(
            "replica_copied",
            corpus=facts.corpus,
            doc_cid=facts.doc_cid,
            chunks=len(exported.chunks),
            source=exported.source,
            reembedded=model != exported.embedding_model,
            fetch_ms=round(fetched.seconds * 1000, 3),
            write_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    async def _export(self, facts: IngestFacts) -> Exported:
        """The document from the first node that serves it a copy matching its event (host first)."""
        nodes = [p.node_id for p in self._bus.providers(EXPORT, (1, 0), {"corpus": facts.corpus})]
        nodes = [n for n in nodes if n != self._bus.node_id]
        nodes.sort(key=lambda n: n != facts.host)
        if not nodes:
            raise NotFound(
                f"no node online serves {EXPORT} of corpus {facts.corpus} (its host {facts.host} is offline)"
            )
        timeout = COPY_TIMEOUT_FLOOR + SECONDS_PER_CHUNK * facts.chunks
        errors: list[BusError] = []
        for node in nodes:
            try:
                return await fetch_export(self._bus, facts, node, timeout=timeout)
            except BusError as exc:
                errors.append(exc)
                if is_refusal(exc):
                    log.warning("replica_copy_refused", doc_cid=facts.doc_cid, source=node, code=exc.code)
        real = [e for e in errors if not isinstance(e, NotFound)]
        raise real[0] if real else errors[-1]

    async def _reembed(self, texts: list[str]) -> np.ndarray:
        parts = []
        for a in range(0, len(texts), MAX_TEXTS // 8):
            parts.append((await self._embedder.embed(texts[a : a + MAX_TEXTS // 8])).vectors)
        return np.concatenate(parts, axis=0).astype(np.float32)

    async def give_up(self, corpus: str) -> None:
        """Stop following ``corpus`` and drop this node's copy (never a corpus it hosts)."""
        state = self.states.pop(corpus, None)
        if state is None:
            return
        await self._forget(corpus)
        with anyio.CancelScope(shield=True):
            await run_blocking(self._store.drop_corpus, corpus, limiter=self._store_limiter)
        log.info("replica_dropped", corpus=corpus)

    def current(self, view: CorpusView) -> bool:
        """Whether this node's copy has every document ``view`` names (for a move)."""
        state = self.states.get(view.corpus)
        return state is not None and state.behind == 0 and state.error is None
