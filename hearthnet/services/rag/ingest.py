"""Document -> pages -> chunks -> embeddings (over the bus) -> corpus, atomically.

The pipeline never imports an embedder: every vector comes from
``bus.call("embed.text", ...)``, which may run on another node.  A document is
written to the corpus in one ``add_document`` call that is atomic per
document (see ``specs/rag.md``), so a failure anywhere before it — embedder
gone, bad file, cancelled call — leaves nothing behind.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.errors import BadRequest, BusError, InternalError, NotFound, Partition
from hearthnet.services.rag.chunker import Chunk, chunk_document, detect_language
from hearthnet.services.rag.reader import Document, read_document
from hearthnet.wire.vectors import decode_embeddings

log = structlog.get_logger("hearthnet.rag.ingest")

EMBED_BATCH = 32
"""Texts per embed.text call: small enough to interleave with queries, large enough to batch well."""

Progress = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Embedder:
    """How this RAG node reaches its embedding model: by name, through the bus."""

    bus: BusAPI
    model: str
    timeout_seconds: float

    def max_tokens(self) -> int:
        """The model window advertised by any provider on the bus (``partition`` if none)."""
        providers = self.bus.providers("embed.text", (1, 0), {"model": self.model})
        if not providers:
            raise Partition(f"no embed.text provider for model {self.model} is reachable")
        windows = [p.descriptor.params.get("max_tokens") for p in providers]
        known = [w for w in windows if isinstance(w, int) and w > 0]
        return min(known) if known else 256

    async def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, int, int]:
        """Vectors (n x dim float32), tokens and truncated counts for ``texts``."""
        try:
            result = await self.bus.call(
                "embed.text",
                (1, 0),
                params={"model": self.model},
                input={"texts": list(texts), "normalize": True},
                timeout=self.timeout_seconds,
            )
        except NotFound as exc:
            raise Partition(
                f"no embed.text provider for model {self.model} is reachable: {exc.message}"
            ) from exc
        vectors = decode_embeddings(result.output)
        if vectors.shape[0] != len(texts):
            raise InternalError(f"embed.text returned {vectors.shape[0]} vectors for {len(texts)} texts")
        meta = result.meta
        return vectors, int(meta.get("tokens", 0)), int(meta.get("truncated", 0))


@dataclass(frozen=True)
class PreparedDocument:
    document: Document
    chunks: list[Chunk]
    language: str


def prepare(
    data: bytes,
    *,
    doc_cid: str,
    title: str,
    language: str | None,
    max_tokens: int,
    filename_hint: str | None,
    extra_metadata: Mapping[str, Any],
) -> PreparedDocument:
    """Blocking: read and chunk a document (run in a worker thread)."""
    document = read_document(data, filename_hint=filename_hint)
    lang = language or detect_language(" ".join(p.text for p in document.pages[:5])[:20_000])
    chunks = chunk_document(
        document,
        doc_cid=doc_cid,
        doc_title=title or document.title_hint or doc_cid[:19],
        language=lang,
        max_tokens=max_tokens,
        extra_metadata=extra_metadata,
    )
    if not chunks:
        raise BadRequest(f"no text to index in {doc_cid}: the document has no extractable text")
    return PreparedDocument(document, chunks, lang)


@dataclass(frozen=True)
class EmbeddedDocument:
    vectors: np.ndarray
    tokens: int
    truncated: int


async def embed_chunks(
    embedder: Embedder, chunks: Sequence[Chunk], progress: Progress | None
) -> EmbeddedDocument:
    """Embed in bounded batches through the bus, reporting progress."""
    parts: list[np.ndarray] = []
    tokens = truncated = 0
    started = time.perf_counter()
    for start in range(0, len(chunks), EMBED_BATCH):
        batch = chunks[start : start + EMBED_BATCH]
        vectors, t, tr = await embedder.embed([c.text for c in batch])
        parts.append(vectors)
        tokens += t
        truncated += tr
        if progress is not None:
            await progress({"stage": "embed", "current": start + len(batch), "total": len(chunks)})
    log.info(
        "chunks_embedded",
        chunks=len(chunks),
        truncated=truncated,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    matrix = np.concatenate(parts, axis=0) if parts else np.zeros((0, 0), dtype=np.float32)
    return EmbeddedDocument(matrix, tokens, truncated)


async def run_blocking(fn: Callable[..., Any], *args: Any, limiter: anyio.CapacityLimiter) -> Any:
    try:
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter)
    except BusError:
        raise
    except MemoryError as exc:
        raise InternalError("out of memory while processing the document") from exc
