"""Chunks embedded as they are read: ``embed.text`` over the bus, a few calls in flight.

The pipeline never imports an embedder: every vector comes from ``embed.text``
(:class:`~hearthnet.contracts.embed.Embedder`), which may run on another node.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from hearthnet.contracts.embed import BUSY, Busy, Embedded, Embedder
from hearthnet.errors import InternalError, unwrap_group
from hearthnet.runtime.blocking import run_blocking
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.store.kept import KeptVectors, text_digest

if TYPE_CHECKING:
    from hearthnet.services.rag.ingest.document import StreamedDocument

__all__ = [
    "EMBED_BATCH",
    "EMBED_IN_FLIGHT",
    "PAGES_AHEAD",
    "ChunkSink",
    "EmbeddedDocument",
    "Progress",
    "embed_streamed",
    "embed_while_reading",
    "hand_over",
]

log = structlog.get_logger("hearthnet.rag.ingest")

EMBED_BATCH = 32
"""Texts per embed.text call: small enough to interleave with queries, large enough to batch well."""
EMBED_IN_FLIGHT = 2
"""``embed.text`` calls an ingest keeps in flight (see :func:`embed_streamed`)."""

PAGES_AHEAD = 16
"""Pages of chunks read ahead of the embedding during an ingest: more than one embed call takes,
so the next call's chunks are ready when the last returns (the buffer holds the reader back)."""

Progress = Callable[[dict[str, Any]], Awaitable[None]]
"""Where an ingest's progress frames go (the caller's stream)."""

ChunkSink = MemoryObjectSendStream[list[Chunk]]
"""Where the reader's worker hands each page's chunks to the embedder."""


@dataclass(frozen=True)
class EmbeddedDocument:
    vectors: np.ndarray
    tokens: int
    truncated: int
    reused: int = 0
    """Chunks whose vectors an earlier, interrupted ingest had kept (not embedded again)."""


class _Kept:
    """The kept vectors (:mod:`~hearthnet.services.rag.store.kept`) as an ingest uses them: looked
    up before a call, each call's vectors kept after it.  Keeping is best effort: a full disk
    or a broken file costs the next ingest its head start, never this ingest."""

    def __init__(self, kept: KeptVectors | None, model: str) -> None:
        self._kept = kept
        self._model = model
        self._limiter = anyio.CapacityLimiter(1)

    async def lookup(self, digests: list[bytes]) -> dict[bytes, np.ndarray]:
        if self._kept is None:
            return {}
        try:
            found: dict[bytes, np.ndarray] = await run_blocking(
                self._kept.lookup, self._model, digests, limiter=self._limiter
            )
            return found
        except (OSError, sqlite3.Error) as exc:
            log.warning("kept_vectors_unreadable", error=type(exc).__name__)
            return {}

    async def embed(
        self, embedder: Embedder, batch: list[Chunk], busy: Busy
    ) -> tuple[np.ndarray, Embedded | None]:
        """``batch``'s vectors in order: those kept, the rest embedded (and then kept); the
        answer of the call that embedded the rest (``None``: everything was kept)."""
        digests = [text_digest(c.text) for c in batch]
        found = await self.lookup(digests)
        todo = [i for i, d in enumerate(digests) if d not in found]
        answer = None
        if todo:
            answer = await embedder.embed_patiently([batch[i].text for i in todo], busy=busy)
            fresh = dict(zip((digests[i] for i in todo), answer.vectors, strict=True))
            await self.keep(
                [(digests[i], str(batch[i].metadata.get("doc_cid", "")), fresh[digests[i]]) for i in todo]
            )
            found.update(fresh)
        return np.stack([found[d] for d in digests]), answer

    async def keep(self, rows: list[tuple[bytes, str, np.ndarray]]) -> None:
        if self._kept is None or not rows:
            return
        try:
            await run_blocking(self._kept.keep, self._model, rows, limiter=self._limiter)
        except (OSError, sqlite3.Error) as exc:
            log.warning("kept_vectors_not_written", error=type(exc).__name__)


async def embed_streamed(
    embedder: Embedder,
    groups: MemoryObjectReceiveStream[list[Chunk]],
    progress: Progress | None,
    *,
    in_flight: int = EMBED_IN_FLIGHT,
    kept: KeptVectors | None = None,
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
    count chunks: ``current`` embedded of ``total`` read so far.  A busy embedder slows the calls
    down (:meth:`~hearthnet.contracts.embed.Embedder.embed_patiently`); progress says so meanwhile.
    Chunks whose vectors ``kept`` holds (an interrupted ingest of the same text) are not sent
    again, and each call's vectors are kept there as they come.
    """
    if in_flight < 1:
        raise ValueError("in_flight must be at least 1")
    return await _StreamedEmbedding(embedder, groups, progress, _Kept(kept, embedder.model), in_flight).run()


@dataclass(eq=False)
class _StreamedEmbedding:
    """One document's :func:`embed_streamed`: the calls sent, the vectors back, the counts."""

    embedder: Embedder
    groups: MemoryObjectReceiveStream[list[Chunk]]
    progress: Progress | None
    store: _Kept
    in_flight: int
    parts: dict[int, np.ndarray] = field(default_factory=dict)
    """Each call's vectors by its number (calls end in any order)."""
    pending: list[Chunk] = field(default_factory=list)
    """Chunks read and not sent yet."""
    tokens: int = 0
    truncated: int = 0
    done: int = 0
    seen: int = 0
    sent: int = 0
    reused: int = 0

    async def run(self) -> EmbeddedDocument:
        started = time.perf_counter()
        slots = anyio.Semaphore(self.in_flight)
        try:
            async with anyio.create_task_group() as tg:
                async for group in self.groups:  # waits only when nothing read is left to embed
                    self.pending.extend(group)
                    self.seen += len(group)
                    self._take_ready()
                    while self.pending:
                        await slots.acquire()
                        self._take_ready()  # what the reader produced while the calls in flight ran
                        batch, self.pending = self.pending[:EMBED_BATCH], self.pending[EMBED_BATCH:]
                        tg.start_soon(self._call, self.sent, batch, slots)
                        self.sent += 1
                        self._take_ready()
        except BaseExceptionGroup as group:
            raise unwrap_group(group) from None
        log.info(
            "chunks_embedded",
            chunks=self.done,
            reused=self.reused,
            truncated=self.truncated,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        vectors = _in_order(self.parts, self.sent, self.embedder.model)
        return EmbeddedDocument(vectors, self.tokens, self.truncated, self.reused)

    def _take_ready(self) -> None:
        """Move groups already read into ``pending``, without waiting, until a call's worth
        (the rest stay in the reader's bounded buffer, which holds the reader back)."""
        while len(self.pending) < EMBED_BATCH:
            try:
                group = self.groups.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                return
            self.pending.extend(group)
            self.seen += len(group)

    async def _busy(self) -> None:
        if self.progress is not None:
            await self.progress({"stage": "embed", "current": self.done, "total": self.seen, "note": BUSY})

    async def _call(self, number: int, batch: list[Chunk], slots: anyio.Semaphore) -> None:
        try:
            vectors, answer = await self.store.embed(self.embedder, batch, self._busy)
        finally:
            slots.release()
        self.parts[number] = vectors
        if answer is not None:
            self.tokens += answer.tokens
            self.truncated += answer.truncated
            self.reused += len(batch) - len(answer.vectors)
        else:
            self.reused += len(batch)
        self.done += len(batch)
        if self.progress is not None:
            await self.progress({"stage": "embed", "current": self.done, "total": self.seen})


def _in_order(parts: dict[int, np.ndarray], calls: int, model: str) -> np.ndarray:
    """The calls' vectors as one matrix in the order the calls were sent."""
    ordered = [parts[i] for i in range(calls)]
    if len({part.shape[1] for part in ordered}) > 1:  # two providers of one model name disagree
        raise InternalError(
            f"embed.text providers of {model} answered vectors of different sizes "
            f"({sorted({part.shape[1] for part in ordered})}): fix the misconfigured one"
        )
    return np.concatenate(ordered, axis=0) if ordered else np.zeros((0, 0), dtype=np.float32)


def hand_over(doc: StreamedDocument, sink: ChunkSink, counted: Callable[[int], None] | None = None) -> None:
    """In the reader's worker: ``doc``'s chunks, a page's group at a time, to ``sink``, each
    group's size told to ``counted`` first (a document that fails on a later page has its chunks
    already handed over counted).  No slot is held: parsing runs in the document's own worker
    process (:mod:`.isolated`); the document is closed at once however this ends, so its worker
    is given back (or killed) with it."""
    with contextlib.closing(doc.chunk_groups()) as groups:
        while True:
            group = next(groups, None)
            if group is None:
                return
            if counted is not None:
                counted(len(group))
            anyio.from_thread.run(sink.send, group)  # may wait for the embedder: no slot held


async def embed_while_reading(
    read: Callable[[ChunkSink], None],
    *,
    embedder: Embedder,
    limiter: anyio.CapacityLimiter,
    progress: Progress | None,
    kept: KeptVectors | None = None,
) -> EmbeddedDocument:
    """``read`` (blocking: it hands chunks over with :func:`hand_over`) in a worker, while what it
    has handed over is embedded (:func:`embed_streamed`); the vectors in the order handed over.
    The document's bytes never reach the event loop; reading overlaps embedding."""
    send, receive = anyio.create_memory_object_stream[list[Chunk]](PAGES_AHEAD)

    async def reader() -> None:
        async with send:
            try:
                await run_blocking(read, send, limiter=limiter)
            except anyio.BrokenResourceError:
                return  # the embedding side failed and stopped listening: its error is reported

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            async with receive:
                embedded = await embed_streamed(embedder, receive, progress, kept=kept)
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None
    return embedded
