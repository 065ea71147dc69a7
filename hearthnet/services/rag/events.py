"""The ``rag.document.ingested`` event: its data shape and who may emit it.

Registered on every node (whatever services it runs) so that every member
stores and relays the same events.  Only a member that is ``trusted`` at that
point of the replay may emit it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest
from hearthnet.events.rules import EventRule

INGESTED = "rag.document.ingested"
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "corpus": str,
    "doc_cid": str,
    "title": str,
    "language": str,
    "chunks": int,
}


def validate_ingested(data: Mapping[str, Any]) -> None:
    missing = [k for k in _FIELDS if k not in data]
    if missing:
        raise BadRequest(f"{INGESTED} lacks {', '.join(missing)}")
    for key, kind in _FIELDS.items():
        value = data[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BadRequest(f"{INGESTED}.{key} has the wrong type")
    if data["chunks"] < 0 or len(data["title"]) > 1000 or len(data["corpus"]) > 64:
        raise BadRequest(f"{INGESTED} values out of range")
    if not str(data["doc_cid"]).startswith("blake3:"):
        raise BadRequest(f"{INGESTED}.doc_cid must be a blake3 CID")


def ingested_rule() -> EventRule:
    return EventRule(event_type=INGESTED, min_level=Level.TRUSTED, validate=validate_ingested)
