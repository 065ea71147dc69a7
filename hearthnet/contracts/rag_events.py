"""The rules of the ``rag.document.ingested`` and ``rag.document.deleted`` events: data shapes and
who may emit them.

Registered on every node (whatever services it runs) so that every member
stores and relays the same events.  Only a member that is ``trusted`` at that
point of the replay may emit either.  The data is bounded like ``rag.ingest``'s
input, so an event stays small: ``ingested`` has exactly the keys ``corpus`` (a
corpus name), ``doc_cid`` (a canonical blob cid), ``title`` (<= 1000 chars),
``language`` (1..16 letters, digits, '-' or '_') and ``chunks`` (0 .. 2^31);
``deleted`` exactly ``corpus`` and ``doc_cid``.  The corpus may not be
``personal`` or ``system``: no honest node announces a document there.

Who may *delete*: the log stores and relays a ``deleted`` event of any member
trusted at its position (the log's rules see only the author's level), but it
cancels an ingest only if its author is that ingest's author (the corpus's
host, which is who answers ``rag.delete``) or a current anchor; see
:func:`hearthnet.services.rag.catalog.documents_in_effect`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hearthnet.blobs.cid import is_cid
from hearthnet.community.levels import Level
from hearthnet.contracts.rag import DELETED, INGESTED, MAX_TITLE, is_language, validate_corpus_name
from hearthnet.errors import BadRequest
from hearthnet.events.rules import EventRule

__all__ = ["deleted_rule", "ingested_rule", "validate_deleted", "validate_ingested"]

MAX_LANGUAGE = 16
MAX_CHUNKS = 1 << 31
_FIELDS: dict[str, type] = {
    "corpus": str,
    "doc_cid": str,
    "title": str,
    "language": str,
    "chunks": int,
}


def validate_ingested(data: Mapping[str, Any]) -> None:
    if set(data) != set(_FIELDS):
        raise BadRequest(f"{INGESTED} data must have exactly the keys {', '.join(_FIELDS)}")
    for key, kind in _FIELDS.items():
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadRequest(f"{INGESTED}.{key} has the wrong type")
    validate_corpus_name(data["corpus"], allow_reserved=False)
    if not is_cid(data["doc_cid"]):
        raise BadRequest(f"{INGESTED}.doc_cid must be a blake3 CID ('blake3:' + 64 lowercase hex digits)")
    if len(data["title"]) > MAX_TITLE:
        raise BadRequest(f"{INGESTED}.title is limited to {MAX_TITLE} characters")
    if not is_language(data["language"]):
        raise BadRequest(f"{INGESTED}.language must be 1..{MAX_LANGUAGE} letters, digits, '-' or '_'")
    if not 0 <= data["chunks"] <= MAX_CHUNKS:
        raise BadRequest(f"{INGESTED}.chunks must be in 0..{MAX_CHUNKS}")


def ingested_rule() -> EventRule:
    return EventRule(event_type=INGESTED, min_level=Level.TRUSTED, validate=validate_ingested)


def validate_deleted(data: Mapping[str, Any]) -> None:
    if set(data) != {"corpus", "doc_cid"}:
        raise BadRequest(f"{DELETED} data must have exactly the keys corpus, doc_cid")
    if not isinstance(data["corpus"], str) or not isinstance(data["doc_cid"], str):
        raise BadRequest(f"{DELETED} corpus and doc_cid must be strings")
    validate_corpus_name(data["corpus"], allow_reserved=False)
    if not is_cid(data["doc_cid"]):
        raise BadRequest(f"{DELETED}.doc_cid must be a blake3 CID ('blake3:' + 64 lowercase hex digits)")


def deleted_rule() -> EventRule:
    """Stored and relayed like ``ingested``; whom it cancels is decided by the corpus view (module doc)."""
    return EventRule(event_type=DELETED, min_level=Level.TRUSTED, validate=validate_deleted)
