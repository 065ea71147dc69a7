"""Archives as retrieval sources of an ask: one ``rag.search_archives`` call, its passages as hits.

An ask may name external ChromaDB archives (the seeds' ``rag_config.archives``) besides
corpora.  They are searched together in one call to this node's ``rag.search_archives`` (which
embeds the question with each archive's model and asks only allowed servers), under the same
deadline as the corpora.  Each archive becomes a retrieval entry ``archive:<name>`` with its
status; its passages become hits whose ``corpus`` is the archive's name and whose file (what a
citation names) is the document's title if the archive records one, else the archive's name.
A malformed ``rag_config`` entry fails the ask (``bad_request`` naming the field); any other
failure leaves the archives out, as an unreachable corpus is left out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from hearthnet.answer.hits import Hit
from hearthnet.answer.retrieve import CorpusResult
from hearthnet.bus.api import BusAPI
from hearthnet.errors import BadRequest, BusError

__all__ = ["ARCHIVE_PREFIX", "archive_keys", "retrieve_archives"]

ARCHIVE_PREFIX = "archive:"
_TITLE_KEYS = ("title", "document_title", "filename")


def archive_keys(archives: Sequence[Mapping[str, Any]]) -> list[str]:
    """The retrieval entry of each archive, in order: ``archive:<name>`` (its collection added when
    two archives of the ask share a name)."""
    keys: list[str] = []
    for entry in archives:
        key = f"{ARCHIVE_PREFIX}{entry.get('name')}"
        if key in keys:
            key = f"{key} ({entry.get('collection_name')})"
        keys.append(key)
    return keys


def _hit(raw: Any, model_of: Mapping[tuple[str, str], str], node: str) -> Hit | None:
    """One passage of the JSON outcome as a hit; anything malformed is dropped."""
    if not isinstance(raw, dict):
        return None
    name, collection = raw.get("archive"), raw.get("collection_name")
    chunk_id, text, score = raw.get("chunk_id"), raw.get("text"), raw.get("score")
    if not (isinstance(name, str) and isinstance(collection, str) and isinstance(chunk_id, str)):
        return None
    if not isinstance(text, str) or not chunk_id:
        return None
    if isinstance(score, bool) or not isinstance(score, int | float) or score != score:
        return None
    metadata = dict(raw["metadata"]) if isinstance(raw.get("metadata"), dict) else {}
    title = next((metadata[k] for k in _TITLE_KEYS if isinstance(metadata.get(k), str) and metadata[k]), name)
    metadata["doc_title"] = title
    metadata.setdefault("chunk_id", chunk_id)
    return Hit(
        chunk_id=chunk_id[:128],
        text=text,
        score=float(score),
        corpus=name,
        node=node,
        embedding_model=model_of.get((name, collection), ""),
        rank=raw["rank"] if type(raw.get("rank")) is int else 1,
        metadata=metadata,
    )


async def retrieve_archives(
    bus: BusAPI,
    question: str,
    archives: Sequence[Mapping[str, Any]],
    *,
    k: int,
    timeout: float,
) -> dict[str, CorpusResult]:
    """Search ``archives`` for ``question`` (``k`` passages in all); one result per archive."""
    keys = archive_keys(archives)
    results = {key: CorpusResult(key) for key in keys}
    started = time.perf_counter()
    try:
        with anyio.fail_after(timeout):
            answer = await bus.call(
                "rag.search_archives",
                (1, 0),
                input={
                    "query": question,
                    "top_k": k,
                    "rag_config": {"archives": [dict(a) for a in archives]},
                    "format": "json",
                },
                timeout=timeout,
            )
    except BadRequest:
        raise  # a malformed rag_config entry: the caller's mistake, named by field
    except (BusError, TimeoutError) as exc:
        code = exc.code if isinstance(exc, BusError) else "timeout"
        for result in results.values():
            result.status = "timeout" if code == "timeout" else "unavailable"
            result.code = code
            result.ms = (time.perf_counter() - started) * 1000
        return results
    ms = (time.perf_counter() - started) * 1000
    doc = answer.output
    raw_outcomes, raw_results = doc.get("archives"), doc.get("results")
    outcomes: list[Any] = raw_outcomes if isinstance(raw_outcomes, list) else []
    passages: list[Any] = raw_results if isinstance(raw_results, list) else []
    model_of = {
        (str(a.get("name")), str(a.get("collection_name"))): str(a.get("embedding_model") or "")
        for a in archives
    }
    by_name: dict[tuple[str, str], str] = {}
    for key, entry, outcome in zip(keys, archives, outcomes, strict=False):
        result = results[key]
        result.ms = ms
        result.node = answer.provider
        status = outcome.get("status") if isinstance(outcome, dict) else None
        result.status = "ok" if status == "ok" else "unavailable"
        error = outcome.get("error") if isinstance(outcome, dict) else None
        if result.status != "ok":
            result.code = str(error.get("error")) if isinstance(error, dict) else "unavailable"
        by_name.setdefault((str(entry.get("name")), str(entry.get("collection_name"))), key)
    for raw in passages:
        hit = _hit(raw, model_of, answer.provider)
        if hit is None:
            continue
        owner = by_name.get((hit.corpus, str(raw.get("collection_name"))))
        if owner is not None:
            results[owner].hits.append(hit)
    for result in results.values():
        if result.status == "pending":
            result.status, result.code = "unavailable", "internal_error"
    return results
