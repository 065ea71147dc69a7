"""The inputs of the RAG capabilities, checked before any work: ``bad_request`` with the reason.

Pure functions (no I/O), one per capability, with the limits of :mod:`hearthnet.contracts.rag`;
``service.py`` calls them first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hearthnet.blobs import is_cid
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import (
    DEFAULT_K,
    DEFAULT_MODE,
    LIST_PAGE,
    MAX_FILENAME,
    MAX_INGEST_BATCH,
    MAX_K,
    MAX_LIST_PAGE,
    MAX_QUERY_CHARS,
    MAX_TITLE,
    QUERY_MODES,
    is_language,
)
from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import check_extra_metadata
from hearthnet.services.rag.search.filters import build_where

__all__ = [
    "IngestInput",
    "delete_input",
    "ingest_batch_input",
    "ingest_input",
    "list_input",
    "query_input",
    "query_mode",
]


def query_input(inp: Mapping[str, Any]) -> tuple[str, int, dict[str, Any] | None, bool]:
    """``rag.query``: ``(query, k, where clause or None, include_text)``."""
    check_input_keys(inp, {"query", "k", "filter", "include_text", "mode"}, "rag.query")
    query = inp.get("query")
    if not isinstance(query, str) or not query.strip():
        raise BadRequest("input.query must be a non-empty string")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"input.query is {len(query)} characters long; at most {MAX_QUERY_CHARS}")
    k = inp.get("k", DEFAULT_K)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise BadRequest("input.k must be a positive integer")
    if k > MAX_K:
        raise BadRequest(f"input.k is {k}; at most {MAX_K}")
    raw_filter = inp.get("filter")
    if raw_filter is not None and not isinstance(raw_filter, dict):
        raise BadRequest("input.filter must be an object")
    where = build_where(raw_filter) if raw_filter else None
    include_text = inp.get("include_text", True)
    if not isinstance(include_text, bool):
        raise BadRequest("input.include_text must be true or false")
    query_mode(inp)
    return query, k, where, include_text


def query_mode(inp: Mapping[str, Any]) -> str:
    """``rag.query``'s ``mode``: ``dense``, ``keyword`` or ``hybrid`` (the default)."""
    mode = inp.get("mode")
    if mode is None:
        mode = DEFAULT_MODE
    if mode not in QUERY_MODES:
        raise BadRequest(f"input.mode must be one of {', '.join(QUERY_MODES)}, got {mode!r}"[:200])
    return str(mode)


@dataclass(frozen=True)
class IngestInput:
    doc_cid: str
    title: str
    language: str | None
    """``None``: detected from the document's first pages."""
    metadata: dict[str, Any]
    filename: str | None
    """The file's name without folders (what ``rag.list_documents`` and query hits show)."""


def ingest_input(inp: Mapping[str, Any]) -> IngestInput:
    doc_cid = inp.get("doc_cid")
    if not isinstance(doc_cid, str) or not is_cid(doc_cid):
        raise BadRequest("input.doc_cid must be a blake3:<hex> CID of a stored blob")
    title = inp.get("title") or ""
    if not isinstance(title, str) or len(title) > MAX_TITLE:
        raise BadRequest(f"input.title must be a string of at most {MAX_TITLE} characters")
    language = inp.get("language")
    if language is not None and not is_language(language):
        raise BadRequest(
            "input.language must be a short language code such as 'en' or 'pt-BR' "
            "(1-16 letters, digits, '-' or '_'), or 'auto' to detect it"
        )
    if language == "auto":
        language = None  # detected from the document's first pages
    metadata = check_extra_metadata(inp.get("metadata") or {})
    filename = inp.get("filename")
    if filename is not None:
        if not isinstance(filename, str):
            raise BadRequest("input.filename must be a string")
        filename = PurePosixPath(filename.replace("\\", "/")).name or None
        if filename is not None and len(filename) > MAX_FILENAME:
            raise BadRequest(f"input.filename is {len(filename)} characters long; at most {MAX_FILENAME}")
    return IngestInput(doc_cid, title, language, metadata, filename)


def ingest_batch_input(inp: Mapping[str, Any]) -> list[IngestInput] | None:
    """``rag.ingest {documents: [...]}``: each document's input, or ``None`` for the one-document form."""
    if "documents" not in inp:
        return None
    check_input_keys(inp, {"documents"}, "rag.ingest")
    docs = inp["documents"]
    if not isinstance(docs, list) or not docs:
        raise BadRequest("input.documents must be a non-empty list of document inputs")
    if len(docs) > MAX_INGEST_BATCH:
        raise BadRequest(f"input.documents has {len(docs)} documents; at most {MAX_INGEST_BATCH} a call")
    out = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise BadRequest(f"input.documents[{i}] must be an object")
        try:
            out.append(ingest_input(doc))
        except BadRequest as exc:
            raise BadRequest(f"input.documents[{i}]: {exc.message}") from None
    cids = [d.doc_cid for d in out]
    if len(set(cids)) != len(cids):
        raise BadRequest("input.documents names one doc_cid twice")
    return out


def list_input(inp: Mapping[str, Any]) -> tuple[str, int]:
    """``rag.list_documents``: ``(after, limit)``: the page after the document id ``after``."""
    check_input_keys(inp, {"after", "limit"}, "rag.list_documents")
    after = inp.get("after") or ""
    if not isinstance(after, str) or len(after) > 100:
        raise BadRequest("input.after must be the doc_cid the previous page ended with")
    limit = inp.get("limit", LIST_PAGE)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIST_PAGE:
        raise BadRequest(f"input.limit must be an integer from 1 to {MAX_LIST_PAGE}")
    return after, limit


def delete_input(inp: Mapping[str, Any]) -> str:
    """``rag.delete``: the document's cid."""
    check_input_keys(inp, {"doc_cid"}, "rag.delete")
    doc_cid = inp.get("doc_cid")
    if not isinstance(doc_cid, str) or not is_cid(doc_cid):
        raise BadRequest(
            "input.doc_cid must be the blake3:<hex> CID of a document (`hearthnet docs` lists them)"
        )
    return doc_cid
