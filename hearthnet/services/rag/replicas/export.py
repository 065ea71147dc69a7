"""``rag.export@1.0``: a document's chunks, metadata and vectors, streamed by any node that holds it
complete (its host or a replica), and the receiving side that checks them against the digest of the
document's signed ``rag.document.ingested`` event before anything is written.

Frames ``{chunks: [{id, text, metadata, vector}]}`` (``vector``: float32 little-endian bytes), at
most ``FRAME_BYTES`` of text and vectors each, in chunk order; the output ``{doc_cid, chunks,
digest, embedding_model, dim, title, language, filename, pages}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog

from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import EXPORT, announced, check_reachable, validate_corpus_name
from hearthnet.contracts.reading import is_file_name
from hearthnet.errors import BadRequest, BusError, InvalidSignature, NotFound, ProtocolError
from hearthnet.runtime.blocking import run_blocking
from hearthnet.runtime.worker_threads import WorkerThreads
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.replicas.digest import document_digest
from hearthnet.services.rag.store import CorpusStore

__all__ = ["FRAME_BYTES", "ExportServer", "Exported", "IngestFacts", "UpdateFacts", "fetch_export"]

log = structlog.get_logger("hearthnet.rag.replicas")

FRAME_BYTES = 256 * 1024
"""Text and vector bytes per frame at most (one chunk more only if it alone is larger): well under
the wire's 1 MiB frame."""


@dataclass(frozen=True)
class UpdateFacts:
    """What the host's latest ``rag.document.updated`` of a document says: its title and whole caller
    metadata since, and the digest of the document with them (``None``: not known to the host)."""

    title: str
    metadata: dict[str, Any]
    digest: str | None
    filename: str | None = None
    """The file name it was given (``None``: unchanged by the update)."""

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> UpdateFacts:
        digest, filename = data.get("digest"), data.get("filename")
        return cls(
            str(data["title"]),
            dict(data["metadata"]),
            digest if isinstance(digest, str) else None,
            filename if isinstance(filename, str) else None,
        )


@dataclass(frozen=True)
class IngestFacts:
    """What the signed ingest event says of a document (``digest`` ``None``: an event from before
    digests, whose copy only its own author may serve), and its host's latest update of it since."""

    corpus: str
    doc_cid: str
    host: str
    title: str
    language: str
    chunks: int
    digest: str | None
    embedding_model: str | None
    dim: int | None
    updated: UpdateFacts | None = None

    @property
    def digests(self) -> frozenset[str]:
        """The digests a copy may match: the document as ingested, or as its latest update left it
        (a node serving it may not have applied that update yet: the copy then applies it)."""
        found = {self.digest, self.updated.digest if self.updated is not None else None}
        return frozenset(d for d in found if d is not None)

    @classmethod
    def of(cls, data: Mapping[str, Any], author: str) -> IngestFacts:
        digest = data.get("digest")
        model = data.get("embedding_model")
        dim = data.get("dim")
        return cls(
            corpus=str(data["corpus"]),
            doc_cid=str(data["doc_cid"]),
            host=author,
            title=str(data["title"]),
            language=str(data["language"]),
            chunks=int(data["chunks"]),
            digest=digest if isinstance(digest, str) else None,
            embedding_model=model if isinstance(model, str) else None,
            dim=dim if type(dim) is int else None,
        )


@dataclass(frozen=True)
class Exported:
    """A document as copied, checked against its event: ready for the store's atomic write."""

    chunks: list[Chunk]
    vectors: np.ndarray
    embedding_model: str
    filename: str | None
    pages: int | None
    source: str
    """The node that served it."""
    wire_bytes: int
    """Bytes of text, metadata and vectors received."""


class ExportServer:
    """The ``rag.export`` handler of one node's store."""

    def __init__(
        self,
        store: CorpusStore,
        threads: WorkerThreads,
        *,
        admit: Callable[[str, str], None] | None = None,
    ) -> None:
        self._store = store
        self._threads = threads
        self._admit = admit
        """``(corpus, caller)``: raises if the caller may not copy the corpus (the host's replica cap)."""
        self.served = 0

    async def handle(self, ctx: CallContext) -> dict[str, Any]:
        corpus = validate_corpus_name(ctx.params.get("corpus"))
        check_reachable(corpus, is_local=ctx.is_local)
        if not announced(corpus):
            raise NotFound(f"corpus {corpus} is never copied to another node")
        check_input_keys(ctx.input, {"doc_cid"}, EXPORT)
        doc_cid = ctx.input.get("doc_cid")
        if not isinstance(doc_cid, str) or not doc_cid:
            raise BadRequest(f"{EXPORT} input.doc_cid must be a document's cid")
        if self._admit is not None and not ctx.is_local:
            self._admit(corpus, ctx.caller)

        def read() -> tuple[Any, dict[str, Any] | None, Any]:
            if corpus not in self._store.corpora():
                return None, None, None
            return (
                self._store.document_chunks(corpus, doc_cid),
                self._store.document(corpus, doc_cid),
                self._store.info(corpus),
            )

        found, doc, info = await run_blocking(read, limiter=self._threads)
        if found is None or doc is None:
            raise NotFound(f"this node does not hold document {doc_cid} of corpus {corpus}")
        ids, texts, metas, vectors = found
        frame: list[dict[str, Any]] = []
        size = 0
        for i, chunk_id in enumerate(ids):
            vector = np.ascontiguousarray(vectors[i], dtype="<f4").tobytes()
            frame.append({"id": chunk_id, "text": texts[i], "metadata": metas[i], "vector": vector})
            size += len(vector) + len(texts[i]) * 4
            if size >= FRAME_BYTES:
                await ctx.send({"chunks": frame})
                frame, size = [], 0
        if frame:
            await ctx.send({"chunks": frame})
        self.served += 1
        pages = self._pages(corpus, doc_cid)
        return {
            "doc_cid": doc_cid,
            "chunks": len(ids),
            "digest": document_digest(ids, texts, metas, vectors),
            "embedding_model": info.embedding_model,
            "dim": info.dim,
            "title": doc["title"],
            "language": doc["language"],
            "filename": doc.get("filename"),
            "pages": pages,
        }

    def _pages(self, corpus: str, doc_cid: str) -> int | None:
        listed, _ = self._store.list_documents(corpus, after=_before(doc_cid), limit=1)
        if listed and listed[0]["doc_cid"] == doc_cid:
            pages = listed[0].get("pages")
            return pages if type(pages) is int else None
        return None


def _before(doc_cid: str) -> str:
    """The greatest string below ``doc_cid`` for a page that starts at it (cids end in hex digits)."""
    return doc_cid[:-1] + chr(ord(doc_cid[-1]) - 1) + "\U0010ffff"


async def fetch_export(bus: BusAPI, facts: IngestFacts, node: str, *, timeout: float) -> Exported:
    """``rag.export`` of ``facts``' document from ``node``, checked: ``invalid_signature`` when it does
    not match the signed event's digest (a tampered or different copy), nothing kept."""
    if facts.digest is None and node != facts.host:
        raise NotFound(
            f"document {facts.doc_cid} was announced without a digest: "
            f"only its host {facts.host} can serve it"
        )
    ids: list[str] = []
    texts: list[str] = []
    metas: list[dict[str, Any]] = []
    vectors: list[bytes] = []
    received = 0
    async with bus.stream(
        EXPORT,
        (1, 0),
        params={"corpus": facts.corpus},
        input={"doc_cid": facts.doc_cid},
        provider=node,
        timeout=timeout,
    ) as call:
        async for frame in call.frames():
            for item in _frame_chunks(frame):
                if len(ids) >= facts.chunks:
                    raise ProtocolError(
                        f"{node} sent more chunks of {facts.doc_cid} than its event "
                        f"announced ({facts.chunks})"
                    )
                ids.append(item[0])
                texts.append(item[1])
                metas.append(item[2])
                vectors.append(item[3])
                received += len(item[3]) + len(item[1].encode())
        result = await call.result()
    out = result.output
    model, dim = out.get("embedding_model"), out.get("dim")
    if not isinstance(model, str) or type(dim) is not int or dim <= 0:
        raise ProtocolError(f"{node}'s {EXPORT} answer lacks the embedding model or dimension")
    if facts.embedding_model is not None and (model, dim) != (facts.embedding_model, facts.dim):
        raise InvalidSignature(
            f"{node} serves {facts.doc_cid} embedded with {model} (dim {dim}), but its signed event says "
            f"{facts.embedding_model} (dim {facts.dim}): refused, nothing written"
        )
    if any(len(v) != 4 * dim for v in vectors):
        raise ProtocolError(f"{node} sent a vector that is not {dim} float32 values")
    matrix = (
        np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), dim).astype(np.float32)
        if vectors
        else np.zeros((0, dim), dtype=np.float32)
    )
    if len(ids) != facts.chunks:
        raise InvalidSignature(
            f"{node} sent {len(ids)} chunks of {facts.doc_cid}, its signed event announced {facts.chunks}: "
            "refused, nothing written"
        )
    if facts.digest is not None:
        got = document_digest(ids, texts, metas, matrix)
        if got not in facts.digests:
            raise InvalidSignature(
                f"the copy of {facts.doc_cid} that {node} sent does not match the digest of its signed "
                "ingest event (tampered or corrupted): refused, nothing written"
            )
    filename, pages = out.get("filename"), out.get("pages")
    return Exported(
        chunks=[Chunk(chunk_id=i, text=t, metadata=m) for i, t, m in zip(ids, texts, metas, strict=True)],
        vectors=matrix,
        embedding_model=model,
        filename=filename if is_file_name(filename) else None,
        pages=pages if type(pages) is int else None,
        source=node,
        wire_bytes=received,
    )


def _frame_chunks(frame: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any], bytes]]:
    raw = frame.get("chunks")
    if not isinstance(raw, list):
        raise ProtocolError(f"a {EXPORT} frame is {{chunks: [...]}}")
    out = []
    for c in raw:
        if not isinstance(c, dict):
            raise ProtocolError(f"a {EXPORT} chunk is {{id, text, metadata, vector}}")
        chunk_id, text, metadata, vector = c.get("id"), c.get("text"), c.get("metadata"), c.get("vector")
        if not (
            isinstance(chunk_id, str)
            and isinstance(text, str)
            and isinstance(metadata, dict)
            and isinstance(vector, bytes)
        ):
            raise ProtocolError(f"a {EXPORT} chunk is {{id, text, metadata, vector}}")
        out.append((chunk_id, text, metadata, vector))
    return out


def is_refusal(exc: BusError) -> bool:
    """Whether a failed copy was the serving node's fault (tampered or malformed), not its absence."""
    return isinstance(exc, InvalidSignature | ProtocolError)
