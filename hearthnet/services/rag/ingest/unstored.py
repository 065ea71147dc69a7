"""``rag.read_document``: a document read and chunked for a caller on this node, and nothing kept.

The reading is an ingest's (:class:`~.document.StreamedDocument` over the killable readers of
:mod:`.isolated`: a parsed format in a worker process with the ingest's limits, stopped at the
call's deadline), the chunks are cut for the node's embedding model, and nothing is stored,
embedded or announced: the composer embeds them and keeps them beside one chat
(``answer.attach``, ``specs/answer.md``).  Contract: :mod:`hearthnet.contracts.reading`.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import structlog

from hearthnet.blobs.cid import blob_cid
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.contracts.embed import Embedder
from hearthnet.contracts.reading import MAX_READ_CHUNKS, READ_DOCUMENT, read_input
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_processes import stopped_at
from hearthnet.services.rag.ingest.document import PreparedDocument, StreamedDocument
from hearthnet.services.rag.ingest.isolated import DocumentReaders

__all__ = ["read_document_registration"]

log = structlog.get_logger("hearthnet.rag")

Output = tuple[dict[str, Any], dict[str, Any]]


def read_document_registration(readers: DocumentReaders, embedder: Embedder) -> Registration:
    """``rag.read_document@1.0``, local-only, two documents at a time (in threads of their own:
    a query never waits behind one)."""
    threads = anyio.CapacityLimiter(2)

    async def handle(ctx: CallContext) -> Output:
        if not ctx.is_local:  # the bus refuses local-only capabilities to peers; never rely on one check
            raise Unauthorized(f"{READ_DOCUMENT} serves this node's own composer only")
        started = time.perf_counter()
        data, filename = read_input(ctx.input)
        max_tokens = embedder.max_tokens()
        doc_cid = blob_cid(data)
        async with stopped_at(ctx.deadline, "reading the attached document") as stop:
            read_parts = readers.reader(stop)

            def read() -> PreparedDocument:
                return StreamedDocument(
                    data,
                    doc_cid=doc_cid,
                    title="",
                    language=None,
                    max_tokens=max_tokens,
                    filename_hint=filename,
                    extra_metadata={},
                    read=read_parts,
                ).read_all()

            prepared = await run_blocking(read, limiter=threads)
        if len(prepared.chunks) > MAX_READ_CHUNKS:
            raise BadRequest(
                f"{filename} gives {len(prepared.chunks):,} chunks; at most {MAX_READ_CHUNKS:,} can be "
                "attached to a chat: ingest it into a corpus instead"
            )
        chunks = [
            {"chunk_id": c.chunk_id, "text": c.text, "page": int(c.metadata.get("page", 0))}
            for c in prepared.chunks
        ]
        ms = (time.perf_counter() - started) * 1000
        log.info("document_read", chunks=len(chunks), pages=prepared.document.page_count, ms=round(ms, 1))
        title = next((c.metadata.get("doc_title") for c in prepared.chunks), None)
        output = {
            "title": title if isinstance(title, str) else filename,
            "pages": prepared.document.page_count,
            "language": prepared.language,
            "embedding_model": embedder.model,
            "chunks": chunks,
        }
        return output, {"ms": round(ms, 1)}

    return Registration(
        CapabilityDescriptor(
            READ_DOCUMENT,
            (1, 0),
            local_only=True,
            max_concurrent=2,
            timeout_seconds=600.0,
            description="read and chunk a document for this node's composer; nothing is stored",
        ),
        handle,
    )
