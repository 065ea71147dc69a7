"""The digest a host puts in each ``rag.document.ingested`` and ``rag.document.updated`` event it
signs: the ingest's own append functions wrapped, so the one ingest flow needs no change.  The digest
is computed over the document as the store holds it (read back after the write), which is exactly
what ``rag.export`` serves."""

from __future__ import annotations

from typing import Any

import anyio

from hearthnet.contracts.rag import INGESTED, UPDATED
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.announce import AppendEvent, AppendEvents
from hearthnet.services.rag.replicas.digest import document_digest
from hearthnet.services.rag.store import CorpusStore

__all__ = ["DigestedAppends"]


class DigestedAppends:
    """``append_event`` / ``append_events`` that add ``digest``, ``embedding_model`` and ``dim`` to an
    ingest event, and ``digest`` to an update event (any other event passes unchanged)."""

    def __init__(
        self,
        store: CorpusStore,
        threads: WorkerThreads | anyio.CapacityLimiter,
        append_event: AppendEvent,
        append_events: AppendEvents | None,
    ) -> None:
        self._store = store
        self._threads = threads
        self._append_event = append_event
        self._append_events = append_events

    def _digested(self, data: dict[str, Any]) -> dict[str, Any]:
        """Blocking: ``data`` with the digest of its document as stored (unchanged if not stored)."""
        corpus, doc_cid = str(data["corpus"]), str(data["doc_cid"])
        found = self._store.document_chunks(corpus, doc_cid)
        if found is None:
            return data
        ids, texts, metas, vectors = found
        digest = document_digest(ids, texts, metas, vectors)
        if "metadata" in data:  # an update: the digest alone (what a copy of it must match)
            return {**data, "digest": digest}
        info = self._store.info(corpus)
        return {
            **data,
            "digest": digest,
            "embedding_model": info.embedding_model,
            "dim": info.dim,
        }

    async def append_event(self, event_type: str, data: dict[str, Any]) -> str:
        if event_type in (INGESTED, UPDATED):
            data = await run_blocking(self._digested, data, limiter=self._threads)
        return await self._append_event(event_type, data)

    async def append_events(self, event_type: str, items: list[dict[str, Any]]) -> list[str]:
        if event_type == INGESTED:
            items = await run_blocking(lambda: [self._digested(d) for d in items], limiter=self._threads)
        if self._append_events is None:
            return [await self._append_event(event_type, d) for d in items]
        return await self._append_events(event_type, items)
