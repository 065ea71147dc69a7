"""The inputs of the RAG capabilities, checked before any work: ``bad_request`` with the reason.

Pure functions (no I/O), one per capability, with the limits of :mod:`hearthnet.contracts.rag`;
``service.py`` calls them first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hearthnet.blobs import is_cid
from hearthnet.contracts.base import check_input_keys
from hearthnet.contracts.rag import (
    DEFAULT_K,
    DEFAULT_MODE,
    GET_PAGE,
    LIST_PAGE,
    MAX_CONTAINS,
    MAX_FILENAME,
    MAX_GET_CHUNKS,
    MAX_INGEST_BATCH,
    MAX_K,
    MAX_LIST_PAGE,
    MAX_QUERY_CHARS,
    MAX_TITLE,
    QUERY_MODES,
    is_language,
)
from hearthnet.errors import BadRequest
from hearthnet.services.rag.chunks import METADATA_KEY, RESERVED_METADATA, check_extra_metadata
from hearthnet.services.rag.search.filters import build_where

__all__ = [
    "MAX_QUERY_DIM",
    "GetInput",
    "IngestInput",
    "QueryInput",
    "UpdateInput",
    "delete_input",
    "get_input",
    "ingest_batch_input",
    "ingest_input",
    "list_input",
    "query_embedding",
    "query_input",
    "query_mode",
    "update_input",
]

MAX_QUERY_DIM = 8192
"""The longest query vector ``rag.query`` takes (a model's dimension is far below)."""


@dataclass(frozen=True)
class QueryInput:
    """``rag.query``'s input, checked: a question, or a vector already embedded (or both: the vector
    for the dense leg, the words for the keyword leg)."""

    query: str | None
    k: int
    where: dict[str, Any] | None
    include_text: bool
    embedding: list[float] | None
    """A query vector given by the caller (the ChromaDB door's ``query_embeddings``): not embedded again."""
    mode: str

    @property
    def text(self) -> str:
        return self.query or ""


def query_input(inp: Mapping[str, Any]) -> QueryInput:
    """``rag.query``'s input; ``bad_request`` with the reason."""
    check_input_keys(inp, {"query", "k", "filter", "include_text", "mode", "embedding"}, "rag.query")
    query = inp.get("query")
    embedding = query_embedding(inp.get("embedding"))
    if query is None and embedding is None:
        raise BadRequest("input.query must be a non-empty string (or input.embedding a query vector)")
    if query is not None:
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
    mode = query_mode(inp)
    if query is None:
        if "mode" in inp and mode != "dense":
            raise BadRequest(f"a {mode} query needs input.query (words): a vector alone answers dense")
        mode = "dense"
    return QueryInput(query, k, where, include_text, embedding, mode)


def query_embedding(value: Any) -> list[float] | None:
    """``input.embedding``: ``None``, or 1..``MAX_QUERY_DIM`` finite numbers (the corpus checks
    its dimension)."""
    if value is None:
        return None
    if not isinstance(value, list | tuple) or not 0 < len(value) <= MAX_QUERY_DIM:
        raise BadRequest(f"input.embedding must be a list of 1..{MAX_QUERY_DIM} numbers")
    out: list[float] = []
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise BadRequest("input.embedding must hold finite numbers only")
        out.append(float(x))
    return out


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
    replaces: str | None = None
    """A document of the corpus this one replaces in one store swap (a watched file's new version)."""


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
    filename = _file_name(inp.get("filename"))
    replaces = inp.get("replaces")
    if replaces is not None and (
        not isinstance(replaces, str) or not is_cid(replaces) or replaces == doc_cid
    ):
        raise BadRequest("input.replaces must be the blake3:<hex> doc_cid of another document of the corpus")
    return IngestInput(doc_cid, title, language, metadata, filename, replaces)


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


@dataclass(frozen=True)
class GetInput:
    ids: list[str] | None
    where: dict[str, Any] | None
    contains: str | None
    limit: int
    offset: int
    include_text: bool
    include_embeddings: bool


def get_input(inp: Mapping[str, Any]) -> GetInput:
    """``rag.get``'s input; ``bad_request`` with the reason."""
    keys = {"ids", "filter", "contains", "limit", "offset", "include_text", "include_embeddings"}
    check_input_keys(inp, keys, "rag.get")
    ids = inp.get("ids")
    if ids is not None:
        if not isinstance(ids, list) or len(ids) > MAX_GET_CHUNKS:
            raise BadRequest(f"input.ids must be a list of at most {MAX_GET_CHUNKS} chunk ids")
        if not all(isinstance(i, str) and 0 < len(i) <= 128 for i in ids):
            raise BadRequest("input.ids must hold chunk ids (text of 1..128 characters)")
    raw_filter = inp.get("filter")
    if raw_filter is not None and not isinstance(raw_filter, dict):
        raise BadRequest("input.filter must be an object")
    contains = inp.get("contains")
    if contains is not None and (not isinstance(contains, str) or not 0 < len(contains) <= MAX_CONTAINS):
        raise BadRequest(f"input.contains must be text of 1..{MAX_CONTAINS} characters")
    limit = inp.get("limit", GET_PAGE)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_GET_CHUNKS:
        raise BadRequest(f"input.limit must be an integer 1..{MAX_GET_CHUNKS}")
    offset = inp.get("offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise BadRequest("input.offset must be an integer of at least 0")
    flags = {}
    for key, default in (("include_text", True), ("include_embeddings", False)):
        value = inp.get(key, default)
        if not isinstance(value, bool):
            raise BadRequest(f"input.{key} must be true or false")
        flags[key] = value
    return GetInput(
        ids=list(ids) if ids else None,
        where=build_where(raw_filter) if raw_filter else None,
        contains=contains,
        limit=limit,
        offset=offset,
        include_text=flags["include_text"],
        include_embeddings=flags["include_embeddings"],
    )


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


@dataclass(frozen=True)
class UpdateInput:
    doc_cid: str
    metadata: dict[str, Any]
    """The fields to set; a ``None`` value removes the field."""
    title: str | None
    filename: str | None = None
    """The file the document is now (a watched file renamed): its citations name it."""


def _file_name(value: object) -> str | None:
    """A document's file name as given: the last part of a path (``/`` or ``\\``); ``None`` when
    not given or when nothing is left of it."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest("input.filename must be a string")
    name = PurePosixPath(value.replace("\\", "/")).name or None
    if name is not None and len(name) > MAX_FILENAME:
        raise BadRequest(f"input.filename is {len(name)} characters long; at most {MAX_FILENAME}")
    return name


def update_input(inp: Mapping[str, Any]) -> UpdateInput:
    """``rag.update``: the document's cid, the metadata fields to set (``null`` removes one), its
    new title and its new file name; at least one of them."""
    check_input_keys(inp, {"doc_cid", "metadata", "title", "filename"}, "rag.update")
    doc_cid = delete_input({"doc_cid": inp.get("doc_cid")})
    raw = inp.get("metadata")
    if raw is not None and not isinstance(raw, dict):
        raise BadRequest("input.metadata must be an object of the fields to set (null removes one)")
    fields = dict(raw or {})
    removed = [k for k, v in fields.items() if v is None]
    for key in removed:
        if not isinstance(key, str) or METADATA_KEY.fullmatch(key) is None:
            raise BadRequest(f"metadata key {str(key)[:70]!r} is invalid")
        if key in RESERVED_METADATA or key.startswith("hn_"):
            raise BadRequest(f"metadata key {key!r} is reserved")
    kept = check_extra_metadata({k: v for k, v in fields.items() if v is not None})
    title = inp.get("title")
    if title is not None and (not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE):
        raise BadRequest(f"input.title must be a non-empty string of at most {MAX_TITLE} characters")
    filename = _file_name(inp.get("filename"))
    if inp.get("filename") is not None and filename is None:
        raise BadRequest("input.filename must name a file")
    if not fields and title is None and filename is None:
        raise BadRequest(
            "input must change something: give metadata fields to set, a title, a file name, or several"
        )
    return UpdateInput(doc_cid, {**kept, **dict.fromkeys(removed)}, title, filename)
