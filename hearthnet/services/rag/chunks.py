"""What a chunk is, for every stage of the RAG service: its id, its text and its metadata (the keys
the chunker sets, and the rules a caller's own document metadata follows, which filters name)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearthnet.contracts.rag_events import MAX_METADATA_FIELDS, MAX_METADATA_STRING, is_metadata_value
from hearthnet.errors import BadRequest

__all__ = [
    "MAX_METADATA_FIELDS",
    "MAX_METADATA_STRING",
    "METADATA_KEY",
    "RESERVED_METADATA",
    "Chunk",
    "check_extra_metadata",
    "chunk_id_for",
]

RESERVED_METADATA = frozenset(
    {
        "doc_cid",
        "doc_title",
        "doc_filename",
        "page",
        "chunk_index",
        "language",
        "char_start",
        "char_end",
        "tokens",
        "chunk_id",
        "ocr",
        "low_text",
        "unit",
        "section",
        "paragraph",
        "row",
        "mark_start",
        "mail_subject",
        "mail_from",
        "mail_to",
        "mail_date",
    }
)
"""Keys the chunker (and ``rag.query``'s output, for ``chunk_id``) sets; callers may not.  ``ocr``
(``true``) marks the chunks of a page whose text OCR read off its image; ``low_text`` (``true``) those of
a page with almost no text (:mod:`.low_text`).  A document without
pages says where a chunk is with ``unit`` (``section``, ``slide``, ``sheet``, ``message``; its
``page`` is that unit's number), ``section`` (a heading path, a slide's title, a sheet's name,
a message's subject) and ``paragraph`` or ``row`` (starting at ``mark_start`` in the unit's
text); an e-mail's chunks carry its ``mail_subject``, ``mail_from``, ``mail_to`` and
``mail_date`` (:func:`hearthnet.contracts.formats.place_of` says the place)."""
METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
"""A metadata field name: also what a ``rag.query`` filter may name (``hn_*`` is reserved)."""


@dataclass(frozen=True)
class Chunk:
    """One chunk: ``text`` is ``page_text[char_start:char_end]``."""

    chunk_id: str
    text: str
    metadata: dict[str, Any]


def chunk_id_for(doc_cid: str, chunk_index: int, char_start: int, page: int) -> str:
    """Deterministic id of a chunk from the document and its position (blake2b-128 hex)."""
    key = f"{doc_cid}\x1f{page}\x1f{chunk_index}\x1f{char_start}".encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest()


def check_extra_metadata(extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """A caller's document metadata, validated so that ChromaDB stores it and filters can name it.

    At most ``MAX_METADATA_FIELDS`` fields; keys match :data:`METADATA_KEY` and
    are neither chunker keys (:data:`RESERVED_METADATA`) nor ``hn_*``; values
    are booleans, 64-bit integers, finite floats or strings of at most
    ``MAX_METADATA_STRING`` characters.
    """
    if extra is None:
        return {}
    if not isinstance(extra, Mapping) or len(extra) > MAX_METADATA_FIELDS:
        raise BadRequest(f"metadata must be an object with at most {MAX_METADATA_FIELDS} fields")
    out: dict[str, Any] = {}
    for key, value in extra.items():
        if not isinstance(key, str) or METADATA_KEY.fullmatch(key) is None:
            raise BadRequest(
                f"metadata key {str(key)[:70]!r} is invalid: use 1-64 letters, digits or '_', "
                "not starting with a digit"
            )
        if key in RESERVED_METADATA or key.startswith("hn_"):
            raise BadRequest(f"metadata key {key!r} is reserved")
        if not is_metadata_value(value):
            raise BadRequest(
                f"metadata value for {key!r} must be a string, number or boolean (a string of at "
                f"most {MAX_METADATA_STRING} characters, a 64-bit integer or a finite float)"
            )
        out[key] = value
    return out
