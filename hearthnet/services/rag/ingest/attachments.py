"""An e-mail's attachments, each a document of its own in the e-mail's corpus.

Once the message (or mailbox) is written, each file it carries (of a format HearthNet reads:
:mod:`.readers.mail`) is stored as a blob (private if the message is) and ingested like any
document, its metadata the message's plus ``attached_to`` (the message's CID).  One that cannot
be read is answered with its error; the message stays ingested.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from hearthnet.blobs import BlobStore
from hearthnet.bus.context import CallContext
from hearthnet.errors import BusError
from hearthnet.runtime.blocking import run_blocking
from hearthnet.services.rag.ingest.readers.common import Attachment
from hearthnet.services.rag.inputs import IngestInput

__all__ = ["ATTACHED_TO", "ingest_attachments"]

ATTACHED_TO = "attached_to"
"""The metadata field naming the message a document was attached to."""

IngestMany = Callable[[CallContext, float, str, list[IngestInput]], Awaitable[tuple[dict[str, Any], Any]]]


async def ingest_attachments(
    ingest_many: IngestMany,
    blobs: BlobStore,
    ctx: CallContext,
    started: float,
    corpus: str,
    parent: IngestInput,
    attachments: Sequence[Attachment],
    *,
    limiter: anyio.CapacityLimiter,
) -> list[dict[str, Any]]:
    """Ingest ``attachments`` of ``parent`` into ``corpus``: an entry per file, in order:
    ``{filename, doc_cid, ok, ...}`` as ``rag.ingest {documents}`` answers each."""
    if not attachments:
        return []
    private = await run_blocking(blobs.is_private, parent.doc_cid, limiter=limiter)
    inputs: list[IngestInput] = []
    failed: list[dict[str, Any]] = []
    for a in attachments:
        put = functools.partial(blobs.put_bytes, a.data, private=private)
        try:
            manifest = await run_blocking(put, limiter=limiter)
        except BusError as exc:  # no room for it (quota): the others go on
            failed.append({"filename": a.filename, "ok": False, "error": exc.code, "message": exc.message})
            continue
        metadata = {**parent.metadata, ATTACHED_TO: parent.doc_cid}
        inputs.append(IngestInput(manifest.doc_cid, "", parent.language, metadata, a.filename))
    unique = list({i.doc_cid: i for i in inputs}.values())  # the same file attached twice: once
    try:
        output, _ = await ingest_many(ctx, started, corpus, unique) if unique else ({"documents": []}, None)
    except BusError as exc:  # the message is ingested; its files are answered with the reason
        refused = {"ok": False, "error": exc.code, "message": exc.message}
        return [{"filename": i.filename, "doc_cid": i.doc_cid, **refused} for i in inputs] + failed
    by_cid = {d["doc_cid"]: d for d in output["documents"]}
    return [{"filename": i.filename, **by_cid[i.doc_cid]} for i in inputs] + failed
