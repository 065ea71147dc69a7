"""Taking a document out of a corpus: the store's atomic delete, then its announcement and its source.

The store's delete is atomic (``deleting`` and a ``deletions`` marker in one
transaction, ``recover()`` finishing a kill); what follows it, the signed
``rag.document.deleted`` event and unpinning the source, is owed until done:
the marker stays until the event is appended, and the next start appends what
a kill left owed (:meth:`Deletions.announce_pending`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from hearthnet.blobs import BlobStore
from hearthnet.contracts.folders import SOURCE_PATH
from hearthnet.contracts.rag import DELETED, announced
from hearthnet.errors import BusError, NotFound
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.announce import AppendEvent, FindEvent
from hearthnet.services.rag.store import CorpusStore

__all__ = ["Deleted", "Deletions"]

log = structlog.get_logger("hearthnet.rag")


@dataclass(frozen=True)
class Deleted:
    chunks_removed: int
    event_id: str
    already_deleted: bool
    """The document was not in the store, only still announced: only its deletion was announced."""
    source_path: str | None = None
    """The watched folder's file it came from (that folder's watcher ingests it again after its
    node's next start, while the file is there)."""

    def output(self, doc_cid: str) -> dict[str, Any]:
        """``rag.delete``'s output: ``{doc_cid, chunks_removed, source_path?}``."""
        out: dict[str, Any] = {"doc_cid": doc_cid, "chunks_removed": self.chunks_removed}
        return out if self.source_path is None else {**out, "source_path": self.source_path}


@dataclass(frozen=True)
class Deletions:
    """The delete steps of the RAG service (which holds the corpus gate and the document's lock)."""

    store: CorpusStore
    blobs: BlobStore
    node_id: str
    store_limiter: anyio.CapacityLimiter
    read_threads: WorkerThreads
    append_event: AppendEvent
    find_event: FindEvent
    counts_changed: Callable[[str], Awaitable[None]]
    """Registers the corpus again with its new counts."""

    async def delete(self, corpus: str, doc_cid: str) -> Deleted:
        """Take ``doc_cid`` wholly out of ``corpus``, announce it, release its source.

        A document not in the store but still announced (a delete whose event
        was never appended, a store that was lost) gets its deletion announced,
        so the community's view follows the store; one neither stored nor
        announced is ``not_found``.
        """

        def lookup() -> dict[str, Any] | None:
            if corpus not in self.store.corpora():
                raise NotFound(f"corpus {corpus} is not held by node {self.node_id}")
            return self.store.document(corpus, doc_cid)

        doc = await run_blocking(lookup, limiter=self.store_limiter)
        announce = announced(corpus)  # never announced (personal), so never its deletion either
        if doc is None:
            ingest_event = (
                await run_blocking(self.find_event, corpus, doc_cid, limiter=self.read_threads)
                if announce
                else None
            )
            if ingest_event is None:
                raise NotFound(
                    f"document {doc_cid} is not in corpus {corpus} on node {self.node_id} "
                    f"('hearthnet docs --corpus {corpus}' lists its documents)"
                )
        # Once the delete starts, it is finished and announced even if the caller walks away.
        with anyio.CancelScope(shield=True):
            removed = await run_blocking(  # also finishes a delete a failure left half done
                lambda: self.store.delete_document(corpus, doc_cid, announce=announce),
                limiter=self.store_limiter,
            )
            if doc is not None:
                await self.counts_changed(corpus)
            event_id = ""
            if announce:
                event_id = await self.append_event(DELETED, {"corpus": corpus, "doc_cid": doc_cid})
                await run_blocking(self.store.deletion_announced, corpus, doc_cid, limiter=self.store_limiter)
            await self.release_source(doc_cid)
        source = (doc or {}).get("metadata", {}).get(SOURCE_PATH)
        return Deleted(removed, event_id, doc is None, source if isinstance(source, str) else None)

    async def announce_pending(self) -> None:
        """Append the events of deletes that were done but not announced (the node died between).

        A document whose ingest is no longer in effect (announced meanwhile) or
        that is back in the store (ingested again) needs no event.  An append
        that fails (this node is no longer trusted) keeps the marker for the
        next start; it never stops this one.
        """
        pending = await run_blocking(self.store.pending_deletions, limiter=self.store_limiter)
        for corpus, doc_cid in pending:
            try:
                back = await run_blocking(
                    lambda c=corpus, d=doc_cid: c in self.store.corpora() and self.store.document(c, d),
                    limiter=self.store_limiter,
                )
                announced = await run_blocking(self.find_event, corpus, doc_cid, limiter=self.read_threads)
                if announced is not None and not back:
                    await self.append_event(DELETED, {"corpus": corpus, "doc_cid": doc_cid})
                    await self.release_source(doc_cid)
                    log.warning("rag_deletion_announced_late", corpus=corpus, doc_cid=doc_cid)
                await run_blocking(self.store.deletion_announced, corpus, doc_cid, limiter=self.store_limiter)
            except BusError as exc:
                log.warning("rag_deletion_not_announced", corpus=corpus, doc_cid=doc_cid, code=exc.code)

    async def release_source(self, doc_cid: str) -> None:
        """Unpin a deleted document's blob unless another corpus here still holds it (never fails
        the delete, which is done: the blob store's garbage collection takes it in time)."""

        def release() -> None:
            if not self.store.holds_source(doc_cid):
                self.blobs.unpin(doc_cid)

        try:
            await run_blocking(release, limiter=self.store_limiter)
        except NotFound:
            pass  # the blob is gone already
        except BusError as exc:
            log.warning("rag_source_not_unpinned", doc_cid=doc_cid, code=exc.code, reason=exc.message[:200])
        except (OSError, sqlite3.Error) as exc:
            log.warning(
                "rag_source_not_unpinned", doc_cid=doc_cid, code="internal_error", reason=str(exc)[:200]
            )
