"""``rag.read_document@1.0``: a document read and chunked by this node's RAG service, and nothing
kept — what a chat's attachment (``answer.attach``) is made of.

Local-only (never advertised, refused to peers): ``input {data (bytes), filename}`` ->
``output {title, pages, language, embedding_model, chunks: [{chunk_id, text, page}]}``.  The
document is read as an ingest reads it (a parsed format in a worker process that the call's
deadline kills, with the same limits), cut into chunks for the node's embedding model, and
neither stored, embedded nor announced.  ``data`` holds 1..``MAX_READ_BYTES`` bytes; a document
of more than ``MAX_READ_CHUNKS`` chunks, or one with no text, is ``bad_request``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.contracts.base import Caller, check_input_keys
from hearthnet.errors import BadRequest, InternalError

__all__ = [
    "MAX_READ_BYTES",
    "MAX_READ_CHUNKS",
    "READ_DOCUMENT",
    "ReadChunk",
    "ReadDocument",
    "checked_file_name",
    "is_file_name",
    "read_document",
    "read_input",
]

READ_DOCUMENT = "rag.read_document"
MAX_READ_BYTES = 8 * 1024 * 1024
"""Largest document read this way (it travels whole in one call, under the control socket's frame)."""
MAX_READ_CHUNKS = 2000
"""Most chunks such a document may give (its vectors are held beside a chat, not in a corpus)."""
MAX_FILENAME = 255


@dataclass(frozen=True)
class ReadChunk:
    chunk_id: str
    text: str
    page: int


@dataclass(frozen=True)
class ReadDocument:
    title: str
    pages: int
    language: str
    embedding_model: str
    """The model the node's corpora are embedded with: the chunks were cut for it."""
    chunks: tuple[ReadChunk, ...]


def read_input(inp: Mapping[str, Any]) -> tuple[bytes, str]:
    """``data`` and ``filename`` of ``rag.read_document``'s input, bounded."""
    check_input_keys(inp, {"data", "filename"}, READ_DOCUMENT)
    data = inp.get("data")
    if not isinstance(data, bytes) or not data:
        raise BadRequest("input.data must be the document's bytes (not empty)")
    if len(data) > MAX_READ_BYTES:
        raise BadRequest(f"the document is {len(data):,} bytes; at most {MAX_READ_BYTES:,} can be attached")
    return data, checked_file_name(inp.get("filename"), "input.filename")


def is_file_name(value: object) -> bool:
    """Whether ``value`` is a stored document's file name: 1..``MAX_FILENAME`` characters and no
    ``/`` (any other character a file's name may hold; ``rag.update`` keeps the last part of a
    path)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_FILENAME and "/" not in value


def checked_file_name(value: object, field: str) -> str:
    """A document's file name as a caller gives it (``field`` names it in the error): 1..
    ``MAX_FILENAME`` printable characters, not all blank."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or not value.isprintable()
        or len(value) > MAX_FILENAME
    ):
        raise BadRequest(f"{field} must be a file name of 1..{MAX_FILENAME} printable characters")
    return value


def _chunk(raw: object) -> ReadChunk:
    if not isinstance(raw, Mapping):
        raise InternalError("rag.read_document answered a chunk that is not an object")
    chunk_id, text, page = raw.get("chunk_id"), raw.get("text"), raw.get("page")
    if not isinstance(chunk_id, str) or not isinstance(text, str) or type(page) is not int:
        raise InternalError("rag.read_document answered a chunk without chunk_id, text and page")
    return ReadChunk(chunk_id, text, page)


async def read_document(caller: Caller, data: bytes, filename: str, *, timeout: float) -> ReadDocument:
    """``data`` read and chunked by this node's RAG service (a local-only capability: only this
    node's own registration can answer)."""
    out = (
        await caller.call(READ_DOCUMENT, input={"data": data, "filename": filename}, timeout=timeout)
    ).output
    chunks = out.get("chunks")
    if not isinstance(chunks, list) or len(chunks) > MAX_READ_CHUNKS:
        raise InternalError("rag.read_document answered no list of chunks")
    model, title = out.get("embedding_model"), out.get("title")
    if not isinstance(model, str) or not model or not isinstance(title, str):
        raise InternalError("rag.read_document answered no embedding model or title")
    pages = out.get("pages")
    return ReadDocument(
        title=title,
        pages=pages if type(pages) is int else 0,
        language=str(out.get("language") or ""),
        embedding_model=model,
        chunks=tuple(_chunk(c) for c in chunks),
    )
