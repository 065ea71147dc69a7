"""ChromaDB's v2 HTTP API as this node speaks it (read-only): pure shapes, no I/O.

A corpus or archive of the mesh is one collection of the default tenant and database, named
by its corpus name (an archive also by its ChromaDB ``collection_name``), with an id derived
from the name (the same on every node), cosine space.  Errors have Chroma's shape
``{error: <ChromaError name>, message}``, which the official client turns back into its
exception classes.  See ``specs/open_doors.md``.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from hearthnet.contracts.rag import MAX_CONTAINS, MAX_K
from hearthnet.errors import BadRequest, BusError

__all__ = [
    "DATABASE",
    "MAX_GET_ALL",
    "TENANT",
    "VERSION",
    "ChromaProblem",
    "Collection",
    "GetRequest",
    "QueryRequest",
    "chroma_error",
    "collection_id",
    "error_of",
    "flat_metadata",
    "parse_get",
    "parse_query",
]

TENANT = "default_tenant"
DATABASE = "default_database"
DATABASE_ID = "00000000-0000-0000-0000-000000000000"
VERSION = "1.0.0"
"""The ChromaDB server version this door answers as (the v2 API of ChromaDB 1.x)."""
MAX_GET_ALL = 10_000
"""The most chunks one ``get`` without a ``limit`` returns (more: give a limit and page)."""
_NAMESPACE: Final = uuid.UUID("6c9f3b52-5f1e-4a8e-9d0b-8e3c1f0a7d21")
_INCLUDE: Final = frozenset({"documents", "metadatas", "distances", "embeddings", "uris", "data"})

_ERRORS: Final[Mapping[str, tuple[int, str]]] = {
    "bad_request": (400, "InvalidArgumentError"),
    "schema_mismatch": (400, "InvalidArgumentError"),
    "unauthorized": (403, "AuthorizationError"),
    "revoked": (403, "AuthorizationError"),
    "not_found": (404, "NotFoundError"),
    "rate_limited": (429, "RateLimitError"),
    "capacity_exceeded": (429, "RateLimitError"),
}


@dataclass(frozen=True)
class ChromaProblem(Exception):
    """An answer in Chroma's error shape: ``status`` and the ChromaError class ``name``."""

    status: int
    name: str
    message: str


def chroma_error(status: int, name: str, message: str) -> bytes:
    return json.dumps({"error": name, "message": message}, ensure_ascii=False).encode()


def error_of(exc: BusError) -> ChromaProblem:
    """A bus error as Chroma's client expects it (5xx: ``InternalError``)."""
    status, name = _ERRORS.get(
        exc.code, (503 if exc.code in ("partition", "timeout") else 500, "InternalError")
    )
    message = exc.message if status < 500 or exc.code != "internal_error" else exc.message[:300]
    return ChromaProblem(status, name, message)


def collection_id(name: str) -> str:
    """The id of the collection of corpus ``name``: the same on every node of every mesh."""
    return str(uuid.uuid5(_NAMESPACE, name))


@dataclass(frozen=True)
class Collection:
    """One corpus or archive of the mesh as a collection."""

    name: str
    embedding_model: str
    host: str
    host_name: str
    chunks: int | None
    documents: int | None
    dimension: int | None
    read_only: bool
    collection_name: str | None = None
    """An archive's ChromaDB collection name (it may be asked for by that name too)."""
    label: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return collection_id(self.name)

    def answers_to(self, wanted: str) -> bool:
        return wanted in (self.name, self.id) or (
            self.collection_name is not None and wanted == self.collection_name
        )

    def model(self) -> dict[str, Any]:
        """The collection as ``GET .../collections/{name}`` answers it."""
        metadata: dict[str, Any] = {
            "hnsw:space": "cosine",
            "hearthnet:corpus": self.name,
            "embedding_model": self.embedding_model,
            "host": self.host,
            "host_name": self.host_name,
            "read_only": True,
            "archive": self.read_only,
        }
        if self.chunks is not None:
            metadata["chunks"] = self.chunks
        if self.documents is not None:
            metadata["documents"] = self.documents
        if self.label:
            metadata["label"] = self.label
        if self.collection_name:
            metadata["collection_name"] = self.collection_name
        return {
            "id": self.id,
            "name": self.name,
            "configuration_json": {"hnsw": {"space": "cosine"}, "spann": None, "embedding_function": None},
            "metadata": metadata,
            "dimension": self.dimension,
            "tenant": TENANT,
            "database": DATABASE,
            "log_position": 0,
            "version": 0,
        }


def flat_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A chunk's metadata as Chroma clients hold it: strings, numbers and booleans only (a list or
    map becomes its JSON text; ``None`` is left out)."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if value is None:
            continue
        if isinstance(value, bool | int | str) or (isinstance(value, float) and math.isfinite(value)):
            out[str(key)] = value
        else:
            out[str(key)] = json.dumps(value, ensure_ascii=False, default=str)
    return out


# -- requests ---------------------------------------------------------------------------------------
def _include(value: Any, default: Sequence[str]) -> list[str]:
    if value is None:
        return list(default)
    if not isinstance(value, list) or not all(isinstance(v, str) and v in _INCLUDE for v in value):
        raise BadRequest(f"include must be a list of {', '.join(sorted(_INCLUDE))}")
    return [v for v in value if v != "data"]


def _where(value: Any) -> dict[str, Any] | None:
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        raise BadRequest("where must be an object")
    return value


def _contains(value: Any) -> str | None:
    """A ``where_document``: ``{"$contains": text}`` is what this door reads."""
    if value is None or value == {}:
        return None
    if isinstance(value, dict) and set(value) == {"$contains"}:
        text = value["$contains"]
        if isinstance(text, str) and 0 < len(text) <= MAX_CONTAINS:
            return text
        raise BadRequest(f"where_document $contains must be text of 1..{MAX_CONTAINS} characters")
    raise BadRequest('where_document: this node reads only {"$contains": "text"}')


def _ids(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest("ids must be a list of strings")
    return value or None


@dataclass(frozen=True)
class GetRequest:
    ids: list[str] | None
    where: dict[str, Any] | None
    contains: str | None
    limit: int | None
    offset: int
    include: list[str]


def parse_get(body: Mapping[str, Any]) -> GetRequest:
    limit = body.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadRequest("limit must be a non-negative integer")
    offset = body.get("offset") or 0
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise BadRequest("offset must be a non-negative integer")
    return GetRequest(
        ids=_ids(body.get("ids")),
        where=_where(body.get("where")),
        contains=_contains(body.get("where_document")),
        limit=limit,
        offset=offset,
        include=_include(body.get("include"), ("metadatas", "documents")),
    )


@dataclass(frozen=True)
class QueryRequest:
    embeddings: list[list[float]] | None
    texts: list[str] | None
    n_results: int
    where: dict[str, Any] | None
    include: list[str]


def parse_query(body: Mapping[str, Any]) -> QueryRequest:
    if body.get("ids"):
        raise BadRequest("ids: this node queries whole collections (leave ids out)")
    if _contains(body.get("where_document")) is not None:
        raise BadRequest("where_document: this node's query takes a where filter only (get takes $contains)")
    n = body.get("n_results", 10)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_K:
        raise BadRequest(f"n_results must be an integer 1..{MAX_K} (this node's limit)")
    embeddings = body.get("query_embeddings")
    texts = body.get("query_texts")
    if embeddings is not None:
        if not isinstance(embeddings, list) or not embeddings or len(embeddings) > 64:
            raise BadRequest("query_embeddings must be a list of 1..64 vectors")
        for vec in embeddings:
            if (
                not isinstance(vec, list)
                or not vec
                or not all(
                    isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in vec
                )
            ):
                raise BadRequest("each query embedding must be a list of finite numbers")
    elif texts is not None:
        if not isinstance(texts, list) or not texts or len(texts) > 64:
            raise BadRequest("query_texts must be a list of 1..64 strings")
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise BadRequest("query_texts must hold non-empty strings")
    else:
        raise BadRequest("query needs query_embeddings (or query_texts)")
    return QueryRequest(
        embeddings=None if embeddings is None else [[float(x) for x in v] for v in embeddings],
        texts=None if embeddings is not None else texts,
        n_results=n,
        where=_where(body.get("where")),
        include=_include(body.get("include"), ("metadatas", "documents", "distances")),
    )
