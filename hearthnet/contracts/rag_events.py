"""The rules of the ``rag.document.ingested``, ``rag.document.deleted`` and ``rag.document.updated``
events: data shapes and who may emit them.

Registered on every node (whatever services it runs) so that every member
stores and relays the same events.  Only a member that is ``trusted`` at that
point of the replay may emit either.  The data is bounded like ``rag.ingest``'s
input, so an event stays small: ``ingested`` has exactly the keys ``corpus`` (a
corpus name), ``doc_cid`` (a canonical blob cid), ``title`` (<= 1000 chars),
``language`` (1..16 letters, digits, '-' or '_') and ``chunks`` (0 .. 2^31), and since replicas
three more together or none (older events stay valid): ``digest`` (``blake3:`` + 64 hex digits, of
the document's chunk ids, texts, metadata and vectors: :mod:`hearthnet.services.rag.replicas.digest`),
``embedding_model`` (<= 200 chars) and ``dim`` (1 .. 8192);
``deleted`` exactly ``corpus`` and ``doc_cid``; ``updated`` exactly ``corpus``, ``doc_cid``, ``title``
(<= 1000 chars) and ``metadata`` (the document's whole caller metadata after the change: at most 32
fields named like a filter's keys, each a boolean, a 64-bit integer, a finite float or a string of at
most 1000 characters), and ``digest`` (as ``ingested``'s) when the host holds the document's chunks;
``rag.corpus.moved`` exactly ``corpus``, ``from`` and ``to`` (node ids), by an anchor.  The corpus may not be
``personal`` or ``system``: no honest node announces a document there.

Who may *delete*: the log stores and relays a ``deleted`` event of any member
trusted at its position (the log's rules see only the author's level), but it
cancels an ingest only if its author is that ingest's author (the corpus's
host, which is who answers ``rag.delete``) or a current anchor; see
:func:`hearthnet.services.rag.catalog.documents_in_effect`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from hearthnet.blobs.cid import is_cid
from hearthnet.community.levels import Level
from hearthnet.contracts.rag import (
    DELETED,
    INGESTED,
    MAX_TITLE,
    MOVED,
    UPDATED,
    check_replicable,
    is_language,
    validate_corpus_name,
)
from hearthnet.contracts.reading import MAX_FILENAME, is_file_name
from hearthnet.errors import BadRequest
from hearthnet.events.rules import EventRule

__all__ = [
    "DIGEST_FIELDS",
    "deleted_rule",
    "ingested_rule",
    "is_metadata_value",
    "moved_rule",
    "updated_rule",
    "validate_deleted",
    "validate_ingested",
    "validate_moved",
    "validate_updated",
]

MAX_LANGUAGE = 16
MAX_CHUNKS = 1 << 31
_FIELDS: dict[str, type] = {
    "corpus": str,
    "doc_cid": str,
    "title": str,
    "language": str,
    "chunks": int,
}
DIGEST_FIELDS: dict[str, type] = {"digest": str, "embedding_model": str, "dim": int}
"""What a replica needs of an ingest event beside the rest (all three, or none: an older event)."""
MAX_MODEL = 200
MAX_DIM = 8192
_DIGEST = re.compile(r"blake3:[0-9a-f]{64}")
_METADATA_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_METADATA_FIELDS = 32
MAX_METADATA_STRING = 1000
_INT64 = 1 << 63
_NODE_ID = re.compile(r"ed25519:[A-Za-z0-9_-]{43}")


def _check_document(event_type: str, data: Mapping[str, Any]) -> None:
    """The document an event names: ``corpus`` (a corpus name, not a reserved one) and ``doc_cid``."""
    validate_corpus_name(data["corpus"], allow_reserved=False)
    if not is_cid(data["doc_cid"]):
        raise BadRequest(f"{event_type}.doc_cid must be a blake3 CID ('blake3:' + 64 lowercase hex digits)")


def validate_ingested(data: Mapping[str, Any]) -> None:
    keys = set(data)
    if keys != set(_FIELDS) and keys != set(_FIELDS) | set(DIGEST_FIELDS):
        raise BadRequest(
            f"{INGESTED} data must have exactly the keys {', '.join(_FIELDS)} "
            f"(and {', '.join(DIGEST_FIELDS)} together, or none of them)"
        )
    fields = {**_FIELDS, **DIGEST_FIELDS} if "digest" in keys else _FIELDS
    for key, kind in fields.items():
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadRequest(f"{INGESTED}.{key} has the wrong type")
    _check_document(INGESTED, data)
    if len(data["title"]) > MAX_TITLE:
        raise BadRequest(f"{INGESTED}.title is limited to {MAX_TITLE} characters")
    if not is_language(data["language"]):
        raise BadRequest(f"{INGESTED}.language must be 1..{MAX_LANGUAGE} letters, digits, '-' or '_'")
    if not 0 <= data["chunks"] <= MAX_CHUNKS:
        raise BadRequest(f"{INGESTED}.chunks must be in 0..{MAX_CHUNKS}")
    if "digest" in keys:
        if not _DIGEST.fullmatch(data["digest"]):
            raise BadRequest(f"{INGESTED}.digest must be 'blake3:' + 64 lowercase hex digits")
        if not 0 < len(data["embedding_model"]) <= MAX_MODEL or not data["embedding_model"].isprintable():
            raise BadRequest(f"{INGESTED}.embedding_model must be 1..{MAX_MODEL} printable characters")
        if not 0 < data["dim"] <= MAX_DIM:
            raise BadRequest(f"{INGESTED}.dim must be in 1..{MAX_DIM}")


def ingested_rule() -> EventRule:
    return EventRule(event_type=INGESTED, min_level=Level.TRUSTED, validate=validate_ingested)


def validate_deleted(data: Mapping[str, Any]) -> None:
    if set(data) != {"corpus", "doc_cid"}:
        raise BadRequest(f"{DELETED} data must have exactly the keys corpus, doc_cid")
    if not isinstance(data["corpus"], str) or not isinstance(data["doc_cid"], str):
        raise BadRequest(f"{DELETED} corpus and doc_cid must be strings")
    _check_document(DELETED, data)


def deleted_rule() -> EventRule:
    """Stored and relayed like ``ingested``; whom it cancels is decided by the corpus view (module doc)."""
    return EventRule(event_type=DELETED, min_level=Level.TRUSTED, validate=validate_deleted)


def is_metadata_value(value: object) -> bool:
    """A value a document's metadata may hold: a boolean, a 64-bit integer, a finite float or a
    string of at most ``MAX_METADATA_STRING`` characters."""
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return -_INT64 <= value < _INT64
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and len(value) <= MAX_METADATA_STRING


def _check_metadata(metadata: Any) -> None:
    """A document's caller metadata as the RAG service keeps it (the same bounds as ``rag.ingest``'s)."""
    if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA_FIELDS:
        raise BadRequest(f"{UPDATED}.metadata must be an object of at most {MAX_METADATA_FIELDS} fields")
    for key, value in metadata.items():
        if not isinstance(key, str) or not _METADATA_KEY.fullmatch(key) or key.startswith("hn_"):
            raise BadRequest(f"{UPDATED}.metadata has an invalid key")
        if not is_metadata_value(value):
            raise BadRequest(f"{UPDATED}.metadata.{key} must be a boolean, a number or a short string")


def validate_updated(data: Mapping[str, Any]) -> None:
    base = {"corpus", "doc_cid", "title", "metadata"}
    if not base <= set(data) <= base | {"digest", "filename"}:
        raise BadRequest(
            f"{UPDATED} data must have exactly the keys corpus, doc_cid, title, metadata "
            "(and digest, filename)"
        )
    if not all(isinstance(data[k], str) for k in ("corpus", "doc_cid", "title")):
        raise BadRequest(f"{UPDATED} corpus, doc_cid and title must be strings")
    _check_document(UPDATED, data)
    if len(data["title"]) > MAX_TITLE:
        raise BadRequest(f"{UPDATED}.title is limited to {MAX_TITLE} characters")
    _check_metadata(data["metadata"])
    if "digest" in data and not (isinstance(data["digest"], str) and _DIGEST.fullmatch(data["digest"])):
        raise BadRequest(f"{UPDATED}.digest must be 'blake3:' + 64 lowercase hex digits")
    if "filename" in data and not is_file_name(data["filename"]):  # as rag.update keeps one
        raise BadRequest(f"{UPDATED}.filename must be a file name of 1..{MAX_FILENAME} characters")


def updated_rule() -> EventRule:
    """Stored and relayed like ``deleted``; whose copy it changes is decided by the corpus view (the
    host's, when its author is the host: :mod:`hearthnet.services.rag.replicas.log`)."""
    return EventRule(event_type=UPDATED, min_level=Level.TRUSTED, validate=validate_updated)


def validate_moved(data: Mapping[str, Any]) -> None:
    if set(data) != {"corpus", "from", "to"}:
        raise BadRequest(f"{MOVED} data must have exactly the keys corpus, from, to")
    if not all(isinstance(data[k], str) for k in ("corpus", "from", "to")):
        raise BadRequest(f"{MOVED} corpus, from and to must be strings")
    check_replicable(data["corpus"])
    for key in ("from", "to"):
        if not _NODE_ID.fullmatch(data[key]):
            raise BadRequest(f"{MOVED}.{key} must be a node id ('ed25519:' + 43 base64url characters)")
    if data["from"] == data["to"]:
        raise BadRequest(f"{MOVED}: from and to are the same node")


def moved_rule() -> EventRule:
    """Only an anchor hands a corpus on (the host may be gone for good)."""
    return EventRule(event_type=MOVED, min_level=Level.ANCHOR, validate=validate_moved)
