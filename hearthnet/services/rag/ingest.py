"""Document -> pages -> chunks -> embeddings (over the bus) -> corpus, atomically.

The pipeline never imports an embedder: every vector comes from
``bus.call("embed.text", ...)``, which may run on another node.  A document is
written to the corpus in one ``add_document`` call that is atomic per
document (see ``specs/rag.md``), so a failure anywhere before it — embedder
gone, bad file, cancelled call — leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import anyio
import numpy as np
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from hearthnet.contracts.embed import Embedder
from hearthnet.errors import BadRequest, InternalError, unwrap_group
from hearthnet.services.rag.chunker import Chunk, PageChunker, detect_language
from hearthnet.services.rag.reader import MAX_TEXT_BYTES, Document, DocumentHeader, PageText, stream_document

log = structlog.get_logger("hearthnet.rag.ingest")

EMBED_BATCH = 32
"""Texts per embed.text call: small enough to interleave with queries, large enough to batch well."""
EMBED_IN_FLIGHT = 2
"""``embed.text`` calls an ingest keeps in flight (see :func:`embed_streamed`)."""

Progress = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class PreparedDocument:
    document: Document
    chunks: list[Chunk]
    language: str


LANGUAGE_PAGES = 5
"""Pages read before chunking starts: the document's language is guessed from them."""


class StreamedDocument:
    """Reads and chunks a document page by page (blocking: use it from a worker thread).

    Opening it reads the header, so an unreadable, encrypted or unsupported
    file fails here, before any work.  :meth:`chunk_groups` then yields the
    chunks of each page as it is read (after the first ``LANGUAGE_PAGES``,
    which decide the language); the chunks are exactly those of reading the
    whole document first.  :meth:`prepared` gives the whole result afterwards,
    :meth:`read_all` does both at once.
    """

    def __init__(
        self,
        data: bytes,
        *,
        doc_cid: str,
        title: str,
        language: str | None,
        max_tokens: int,
        filename_hint: str | None,
        extra_metadata: Mapping[str, Any],
        max_text_bytes: int | None = MAX_TEXT_BYTES,
    ) -> None:
        self._parts = stream_document(data, filename_hint=filename_hint, max_text_bytes=max_text_bytes)
        header = next(self._parts)
        assert isinstance(header, DocumentHeader)
        self.header = header
        self._doc_cid = doc_cid
        self._title = title or header.title_hint or doc_cid[:19]
        self._language = language
        self._max_tokens = max_tokens
        self._extra = extra_metadata
        self._filename = PurePath(filename_hint).name if filename_hint else None
        self._pages: list[PageText] = []
        self._chunks: list[Chunk] = []
        self._done = False

    def chunk_groups(self) -> Generator[list[Chunk], None, None]:
        head: list[PageText] = []
        chunker: PageChunker | None = None
        with contextlib.closing(self._parts):
            for part in self._parts:
                if not isinstance(part, PageText):
                    continue
                self._pages.append(part)
                if chunker is None:
                    head.append(part)
                    if len(head) < LANGUAGE_PAGES:
                        continue
                    chunker = self._chunker(head)
                    yield from self._chunked(chunker, head)
                else:
                    yield from self._chunked(chunker, [part])
            if chunker is None:  # fewer pages than LANGUAGE_PAGES
                yield from self._chunked(self._chunker(head), head)
        self._done = True

    def _chunker(self, head: list[PageText]) -> PageChunker:
        if not self._language:
            self._language = detect_language(" ".join(p.text for p in head[:LANGUAGE_PAGES])[:20_000])
        return PageChunker(
            doc_cid=self._doc_cid,
            doc_title=self._title,
            language=self._language,
            max_tokens=self._max_tokens,
            extra_metadata=self._extra,
            doc_filename=self._filename,
        )

    def _chunked(self, chunker: PageChunker, pages: list[PageText]) -> Iterator[list[Chunk]]:
        for page in pages:
            chunks = chunker.chunks_of(page)
            self._chunks.extend(chunks)
            if chunks:
                yield chunks

    def read_all(self) -> PreparedDocument:
        """Blocking: read and chunk the whole document (:meth:`chunk_groups`, then :meth:`prepared`)."""
        for _ in self.chunk_groups():
            pass
        return self.prepared()

    def prepared(self) -> PreparedDocument:
        """The document and all its chunks, once :meth:`chunk_groups` is exhausted."""
        if not self._done:
            raise RuntimeError("read every chunk group first")
        if not self._chunks:
            raise BadRequest(f"no text to index in {self._doc_cid}: the document has no extractable text")
        h = self.header
        document = Document(self._pages, h.content_type, h.title_hint, h.page_count)
        return PreparedDocument(document, self._chunks, str(self._language))


@dataclass(frozen=True)
class EmbeddedDocument:
    vectors: np.ndarray
    tokens: int
    truncated: int


async def embed_streamed(
    embedder: Embedder,
    groups: MemoryObjectReceiveStream[list[Chunk]],
    progress: Progress | None,
    *,
    in_flight: int = EMBED_IN_FLIGHT,
) -> EmbeddedDocument:
    """Embed chunks as they are read, up to ``in_flight`` ``embed.text`` calls at a time.

    Each call takes up to ``EMBED_BATCH`` of the chunks read so far and is
    sent as soon as a call slot is free: the embedder never waits for a full
    batch while chunks are ready (so the first call goes out after the first
    pages, and a reader slower than the embedder gets smaller calls, not an
    idle embedder).  With a call in flight while the next one is sent, the
    embedder has the next call's texts while it finishes the last batch of
    the previous one (its inference threads would take turns idling at every
    call's end) and, on another node, while an answer crosses the network.
    Vectors keep the chunks' order whatever order the calls end in.  The
    first failure cancels the other call and is raised.  Progress frames
    count chunks: ``current`` embedded of ``total`` read so far.
    """
    if in_flight < 1:
        raise ValueError("in_flight must be at least 1")
    parts: dict[int, np.ndarray] = {}
    pending: list[Chunk] = []
    tokens = truncated = done = seen = sent = 0
    slots = anyio.Semaphore(in_flight)
    started = time.perf_counter()

    def take_ready() -> None:
        """Move groups already read into ``pending``, without waiting, until a call's worth
        (the rest stay in the reader's bounded buffer, which holds the reader back)."""
        nonlocal seen
        while len(pending) < EMBED_BATCH:
            try:
                group = groups.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                return
            pending.extend(group)
            seen += len(group)

    async def call(number: int, batch: list[Chunk]) -> None:
        nonlocal tokens, truncated, done
        try:
            answer = await embedder.embed([c.text for c in batch])
        finally:
            slots.release()
        parts[number] = answer.vectors
        tokens += answer.tokens
        truncated += answer.truncated
        done += len(batch)
        if progress is not None:
            await progress({"stage": "embed", "current": done, "total": seen})

    try:
        async with anyio.create_task_group() as tg:
            async for group in groups:  # waits only when nothing read is left to embed
                pending.extend(group)
                seen += len(group)
                take_ready()
                while pending:
                    await slots.acquire()
                    take_ready()  # what the reader produced while the calls in flight ran
                    batch, pending = pending[:EMBED_BATCH], pending[EMBED_BATCH:]
                    tg.start_soon(call, sent, batch)
                    sent += 1
                    take_ready()
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None
    log.info(
        "chunks_embedded",
        chunks=done,
        truncated=truncated,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    ordered = [parts[i] for i in range(sent)]
    if len({part.shape[1] for part in ordered}) > 1:  # two providers of one model name disagree
        raise InternalError(
            f"embed.text providers of {embedder.model} answered vectors of different sizes "
            f"({sorted({part.shape[1] for part in ordered})}): fix the misconfigured one"
        )
    matrix = np.concatenate(ordered, axis=0) if ordered else np.zeros((0, 0), dtype=np.float32)
    return EmbeddedDocument(matrix, tokens, truncated)
