"""Chunks embedded as they are read: ``embed.text`` over the bus, a few calls in flight.

The pipeline never imports an embedder: every vector comes from ``embed.text``
(:class:`~hearthnet.contracts.embed.Embedder`), which may run on another node.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from hearthnet.contracts.embed import Embedder
from hearthnet.errors import InternalError, unwrap_group
from hearthnet.services.rag.chunks import Chunk

__all__ = ["EMBED_BATCH", "EMBED_IN_FLIGHT", "EmbeddedDocument", "Progress", "embed_streamed"]

log = structlog.get_logger("hearthnet.rag.ingest")

EMBED_BATCH = 32
"""Texts per embed.text call: small enough to interleave with queries, large enough to batch well."""
EMBED_IN_FLIGHT = 2
"""``embed.text`` calls an ingest keeps in flight (see :func:`embed_streamed`)."""

Progress = Callable[[dict[str, Any]], Awaitable[None]]
"""Where an ingest's progress frames go (the caller's stream)."""


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
