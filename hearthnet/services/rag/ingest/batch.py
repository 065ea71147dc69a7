"""Several documents read one after another in a worker while their chunks are embedded together.

The ingest of many small files is dominated by what each document pays once (a call, a write,
an event), not by its embedding: a batch's chunks go to ``embed.text`` in calls of up to
``EMBED_BATCH`` chunks across documents (:func:`~.embed.embed_streamed`), so the embedder works
on full calls however small each document is.  A document that cannot be read (unsupported,
no text, over the size cap) gets its own error; the others go on.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import numpy as np

from hearthnet.blobs import BlobStore
from hearthnet.contracts.embed import Embedder
from hearthnet.errors import BusError, unwrap_group
from hearthnet.runtime.blocking import run_blocking
from hearthnet.services.rag.chunks import Chunk
from hearthnet.services.rag.ingest.document import PreparedDocument, StreamedDocument
from hearthnet.services.rag.ingest.embed import Progress, embed_streamed
from hearthnet.services.rag.ingest.ocr import ScanReader
from hearthnet.services.rag.inputs import IngestInput

__all__ = ["ReadOutcome", "read_and_embed_many"]

GROUPS_AHEAD = 16
"""Chunk groups (pages) read ahead of the embedding."""


@dataclass
class ReadOutcome:
    """One document of a batch: its chunks and vectors, or why it could not be read."""

    inp: IngestInput
    prepared: PreparedDocument | None = None
    vectors: np.ndarray | None = None
    error: BusError | None = None
    sent: int = 0
    """Chunks of it handed to the embedder (their rows in the batch's vectors)."""


async def read_and_embed_many(
    inputs: Sequence[IngestInput],
    *,
    blobs: BlobStore,
    embedder: Embedder,
    max_tokens: int,
    parse_slot: threading.BoundedSemaphore,
    limiter: anyio.CapacityLimiter,
    progress: Progress | None,
    scans: Callable[[str], ScanReader | None] | None = None,
) -> list[ReadOutcome]:
    """Read and chunk ``inputs`` in order in one worker, embedding their chunks as they come.

    An embedding failure fails the whole batch (nothing was written); a document's own read
    failure is recorded on its outcome, and its chunks already embedded are dropped.  ``scans``
    gives the reader of a document's scanned pages (``ocr.page``), as one document's ingest has.
    """
    outcomes = [ReadOutcome(inp) for inp in inputs]
    send, receive = anyio.create_memory_object_stream[list[Chunk]](GROUPS_AHEAD)

    def read_one(outcome: ReadOutcome) -> None:
        inp = outcome.inp
        doc = StreamedDocument(
            blobs.read_blob(inp.doc_cid),
            doc_cid=inp.doc_cid,
            title=inp.title,
            language=inp.language,
            max_tokens=max_tokens,
            filename_hint=inp.filename,
            extra_metadata=inp.metadata,
            ocr=scans(inp.doc_cid) if scans is not None else None,
        )
        with contextlib.closing(doc.chunk_groups()) as groups:
            while True:
                with parse_slot:  # one page's parsing at a time across ingests
                    group = next(groups, None)
                if group is None:
                    break
                outcome.sent += len(group)
                anyio.from_thread.run(send.send, group)  # may wait for the embedder: no slot held
        outcome.prepared = doc.prepared()

    def read() -> None:
        for outcome in outcomes:
            try:
                read_one(outcome)
            except BusError as exc:
                outcome.error = exc

    async def reader() -> None:
        async with send:
            try:
                await run_blocking(read, limiter=limiter)
            except anyio.BrokenResourceError:
                return  # the embedding side failed and stopped listening: its error is reported

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            async with receive:
                embedded = await embed_streamed(embedder, receive, progress)
    except BaseExceptionGroup as group:
        raise unwrap_group(group) from None
    row = 0
    for outcome in outcomes:
        if outcome.error is None and outcome.prepared is not None:
            outcome.vectors = embedded.vectors[row : row + outcome.sent]
        row += outcome.sent
    return outcomes
