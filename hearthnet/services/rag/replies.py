"""``rag.query``'s reply, a store corpus's and an archive's alike: its ``chunks`` and the meta every
corpus gives, the query logged as it is answered; and how many documents a ``rag.list_documents``
page holds."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import structlog

from hearthnet.bus.context import CallContext
from hearthnet.services.rag.inputs import QueryInput
from hearthnet.services.rag.results import Hit

__all__ = ["LIST_PAGE_BYTES", "document_page", "query_chunks", "query_reply"]

_log = structlog.get_logger("hearthnet.rag")

LIST_PAGE_BYTES = 512 * 1024
"""The most a ``rag.list_documents`` page takes (as JSON; its msgpack frame is smaller): within a
peer frame's 1 MiB even when each document carries 32 long metadata fields."""


def document_page(docs: Sequence[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """The first documents of ``docs`` a page holds (at most ``limit``, at most
    :data:`LIST_PAGE_BYTES`; always one), and whether more follow."""
    out: list[dict[str, Any]] = []
    size = 0
    for doc in docs[:limit]:
        size += len(json.dumps(doc, ensure_ascii=False).encode())
        if out and size > LIST_PAGE_BYTES:
            return out, True
        out.append(doc)
    return out, len(docs) > limit


def query_chunks(hits: Sequence[Hit], *, include_text: bool) -> list[dict[str, Any]]:
    """``rag.query``'s ``chunks``, a store corpus's or an archive's: each hit's rank, its ``score``
    beside the cosine (``similarity``; the score itself when it is the cosine), its metadata with
    its ``chunk_id``, and its text unless the query asked for none."""
    out = []
    for rank, hit in enumerate(hits, start=1):
        similarity = hit.score if hit.similarity is None else hit.similarity
        item: dict[str, Any] = {
            "rank": rank,
            "score": round(float(hit.score), 6),
            "similarity": round(float(similarity), 6),
            "metadata": {**hit.metadata, "chunk_id": hit.chunk_id},
        }
        if include_text and hit.text is not None:
            item["text"] = hit.text
        out.append(item)
    return out


def query_reply(
    ctx: CallContext,
    hits: Sequence[Hit],
    asked: QueryInput,
    *,
    corpus: str,
    mode: str,
    started: float,
    embed_seconds: float,
    model: str,
    **logged: Any,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``rag.query``'s output for what was ``asked`` and the meta every corpus gives (``corpus``,
    ``ms`` since ``started``,
    ``embed_ms``, ``embedding_model``, the ``mode`` that answered), a store corpus's or an archive's;
    the query logged as ``rag_query`` with ``logged`` (never its question or text)."""
    chunks = query_chunks(hits, include_text=asked.include_text)
    ms = round((time.perf_counter() - started) * 1000, 3)
    _log.info(
        "rag_query",
        corpus=corpus,
        k=asked.k,
        mode=mode,
        hits=len(chunks),
        ms=ms,
        caller=ctx.caller,
        trace_id=ctx.trace_id,
        **logged,
    )
    meta = {
        "corpus": corpus,
        "ms": ms,
        "embed_ms": round(embed_seconds * 1000, 3),
        "embedding_model": model,
        "mode": mode,
    }
    return {"chunks": chunks}, meta
