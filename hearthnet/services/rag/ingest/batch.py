"""Several documents read one after another in a worker while their chunks are embedded together.

The ingest of many small files is dominated by what each document pays once (a call, a write,
an event), not by its embedding: a batch's chunks go to ``embed.text`` in calls of up to
``EMBED_BATCH`` chunks across documents (:func:`~.embed.embed_streamed`), so the embedder works
on full calls however small each document is.  A document that cannot be read (unsupported,
no text, over the size cap) gets its own error; the others go on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import numpy as np

from hearthnet.blobs import BlobStore
from hearthnet.contracts.embed import Embedder
from hearthnet.errors import BusError
from hearthnet.services.rag.ingest.document import PreparedDocument, ReadParts, StreamedDocument
from hearthnet.services.rag.ingest.embed import ChunkSink, Progress, embed_while_reading, hand_over
from hearthnet.services.rag.ingest.ocr import ScanReader
from hearthnet.services.rag.ingest.read import MAX_TEXT_BYTES
from hearthnet.services.rag.inputs import IngestInput
from hearthnet.services.rag.store.kept import KeptVectors

__all__ = ["BatchRead", "ReadOutcome", "read_and_embed_many"]


@dataclass
class ReadOutcome:
    """One document of a batch: its chunks and vectors, or why it could not be read."""

    inp: IngestInput
    prepared: PreparedDocument | None = None
    vectors: np.ndarray | None = None
    error: BusError | None = None
    sent: int = 0
    """Chunks of it handed to the embedder (their rows in the batch's vectors)."""


@dataclass(frozen=True)
class BatchRead:
    """A batch read and embedded: each document's outcome, in order, and how many of the batch's
    chunks the embedder truncated."""

    outcomes: list[ReadOutcome]
    truncated: int


async def read_and_embed_many(
    inputs: Sequence[IngestInput],
    *,
    blobs: BlobStore,
    embedder: Embedder,
    max_tokens: int,
    read_parts: ReadParts,
    limiter: anyio.CapacityLimiter,
    progress: Progress | None,
    scans: Callable[[str], ScanReader | None] | None = None,
    kept: KeptVectors | None = None,
    max_text_bytes: int | None = MAX_TEXT_BYTES,
) -> BatchRead:
    """Read and chunk ``inputs`` in order in one worker, embedding their chunks as they come.

    An embedding failure fails the whole batch (nothing was written); a document's own read
    failure is recorded on its outcome, and its chunks already embedded are dropped.  ``scans``
    gives the reader of a document's scanned pages (``ocr.page``), as one document's ingest has;
    ``read_parts`` reads each document's bytes (in a worker process the caller can stop);
    ``max_text_bytes=None`` lifts the text cap (a reindex takes again what was accepted once).
    """
    outcomes = [ReadOutcome(inp) for inp in inputs]

    def read_one(outcome: ReadOutcome, sink: ChunkSink) -> None:
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
            read=read_parts,
            max_text_bytes=max_text_bytes,
        )

        def counted(n: int) -> None:
            outcome.sent += n

        hand_over(doc, sink, counted)
        outcome.prepared = doc.prepared()

    def read(sink: ChunkSink) -> None:
        for outcome in outcomes:
            try:
                read_one(outcome, sink)
            except BusError as exc:
                outcome.error = exc

    embedded = await embed_while_reading(
        read, embedder=embedder, limiter=limiter, progress=progress, kept=kept
    )
    row = 0
    for outcome in outcomes:
        if outcome.error is None and outcome.prepared is not None:
            outcome.vectors = embedded.vectors[row : row + outcome.sent]
        row += outcome.sent
    return BatchRead(outcomes, embedded.truncated)
