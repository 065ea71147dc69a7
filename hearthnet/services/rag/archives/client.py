"""A small async client for ChromaDB's v2 REST API: the calls an archive needs, nothing else.

The flow is the one the seed runtimes use: ``GET .../collections/{name}``
resolves a collection name to its id (and dimension), then ``POST
.../collections/{id}/query`` (or ``/get``, ``/count``) by that id.  It only
reads; there is no call here that writes.

Failures become bus errors at this boundary: the server unreachable (refused,
reset, no route, a connect timeout) -> ``Partition``; a request over the
timeout -> ``Timeout``; HTTP 404 -> ``NotFound``; any other status or a
malformed answer -> ``InternalError``.  Messages name the server and the
collection, never a vector or a document's text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from hearthnet.errors import InternalError, NotFound, Partition, Timeout

__all__ = [
    "API_PREFIX",
    "ChromaHttpClient",
    "CollectionRef",
    "GetResult",
    "QueryResult",
]

API_PREFIX = "/api/v2"
DEFAULT_TENANT = "default_tenant"
DEFAULT_DATABASE = "default_database"
CONNECT_TIMEOUT_SECONDS = 5.0
"""Longest wait for a TCP connection (a server that does not accept one is unreachable)."""
_ERROR_NAME_MAX = 60


@dataclass(frozen=True)
class CollectionRef:
    """A collection as ``GET .../collections/{name}`` describes it."""

    id: str
    name: str
    dimension: int | None
    """``None`` while the collection holds no vector."""
    space: str
    """Its distance: ``cosine``, ``l2`` or ``ip`` (ChromaDB's default is ``l2``)."""


@dataclass(frozen=True)
class QueryResult:
    """One query's nearest entries, closest first."""

    ids: list[str]
    documents: list[str | None]
    metadatas: list[dict[str, Any]]
    distances: list[float]


@dataclass(frozen=True)
class GetResult:
    ids: list[str]
    metadatas: list[dict[str, Any]]


class ChromaHttpClient:
    """Read-only access to one ChromaDB server (``base_url``), each request bounded by ``timeout``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        http: httpx.AsyncClient | None = None,
        tenant: str = DEFAULT_TENANT,
        database: str = DEFAULT_DATABASE,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(follow_redirects=False)
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_SECONDS))
        self._collections = (
            f"{self.base_url}{API_PREFIX}/tenants/{quote(tenant, safe='')}"
            f"/databases/{quote(database, safe='')}/collections"
        )

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # requests ------------------------------------------------------------------------------
    async def get_collection(self, name: str) -> CollectionRef:
        """Resolve a collection name (``NotFound`` if the server has no such collection)."""
        body = await self._request("GET", f"/{quote(name, safe='')}", collection=name)
        if not isinstance(body, dict):
            raise self._malformed(name, "collection")
        cid, got_name, dim = body.get("id"), body.get("name"), body.get("dimension")
        if not isinstance(cid, str) or not cid or not isinstance(got_name, str):
            raise self._malformed(name, "collection")
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int) or dim < 1):
            raise self._malformed(name, "collection dimension")
        return CollectionRef(id=cid, name=got_name, dimension=dim, space=_space(body))

    async def count(self, ref: CollectionRef) -> int:
        body = await self._request("GET", f"/{quote(ref.id, safe='')}/count", collection=ref.name)
        if isinstance(body, bool) or not isinstance(body, int) or body < 0:
            raise self._malformed(ref.name, "count")
        return body

    async def query(
        self,
        ref: CollectionRef,
        embedding: Sequence[float],
        *,
        n_results: int,
        where: Mapping[str, Any] | None,
        include_text: bool,
    ) -> QueryResult:
        """The ``n_results`` entries nearest to ``embedding`` that match ``where``."""
        include = ["metadatas", "distances", *(["documents"] if include_text else [])]
        payload = {
            "query_embeddings": [[float(x) for x in embedding]],
            "n_results": n_results,
            "where": dict(where) if where else None,
            "include": include,
        }
        body = await self._request(
            "POST", f"/{quote(ref.id, safe='')}/query", collection=ref.name, json=payload
        )
        try:
            ids = _first_row(body, "ids")
            n = len(ids)
            metas = _first_row(body, "metadatas") if n else []
            dists = _first_row(body, "distances") if n else []
            docs = _first_row(body, "documents") if include_text and n else [None] * n
        except (TypeError, KeyError, IndexError):
            raise self._malformed(ref.name, "query answer") from None
        if not (len(metas) == len(dists) == len(docs) == n):
            raise self._malformed(ref.name, "query answer")
        if not all(isinstance(i, str) for i in ids) or not all(_finite(d) for d in dists):
            raise self._malformed(ref.name, "query answer")
        if not all(d is None or isinstance(d, str) for d in docs):
            raise self._malformed(ref.name, "query answer")
        return QueryResult(
            ids=list(ids),
            documents=list(docs),
            metadatas=[m if isinstance(m, dict) else {} for m in metas],
            distances=[float(d) for d in dists],
        )

    async def get(
        self,
        ref: CollectionRef,
        *,
        where: Mapping[str, Any] | None,
        limit: int,
        offset: int = 0,
        metadata: bool = True,
    ) -> GetResult:
        """Ids (and metadata, unless ``metadata`` is false) of entries matching ``where``; never
        vectors or text."""
        payload = {
            "where": dict(where) if where else None,
            "limit": limit,
            "offset": offset,
            "include": ["metadatas"] if metadata else [],
        }
        body = await self._request(
            "POST", f"/{quote(ref.id, safe='')}/get", collection=ref.name, json=payload
        )
        ids = body.get("ids") if isinstance(body, dict) else None
        metas = body.get("metadatas") if isinstance(body, dict) else None
        if metas is None and isinstance(ids, list) and (not ids or not metadata):
            metas = [{}] * len(ids)
        if not isinstance(ids, list) or not isinstance(metas, list) or len(ids) != len(metas):
            raise self._malformed(ref.name, "get answer")
        if not all(isinstance(i, str) for i in ids):
            raise self._malformed(ref.name, "get answer")
        return GetResult(ids=list(ids), metadatas=[m if isinstance(m, dict) else {} for m in metas])

    # plumbing ------------------------------------------------------------------------------
    async def _request(
        self, method: str, path: str, *, collection: str, json: Mapping[str, Any] | None = None
    ) -> Any:
        where = f"ChromaDB at {self.base_url}"
        try:
            resp = await self._http.request(
                method, self._collections + path, json=json, timeout=self._timeout
            )
        except httpx.ConnectTimeout as exc:
            raise Partition(
                f"{where} did not accept a connection within {self._timeout.connect:g} s"
            ) from exc
        except httpx.TimeoutException as exc:
            raise Timeout(
                f"{where} did not answer within {self.timeout:g} s (collection {collection})"
            ) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise Partition(f"{where} is unreachable: {type(exc).__name__}") from exc
        except httpx.HTTPError as exc:
            raise InternalError(f"{where}: request failed: {type(exc).__name__}") from exc
        if resp.status_code == 404:
            raise NotFound(f"collection {collection} does not exist on {where}")
        if resp.status_code != 200:
            raise InternalError(
                f"{where} answered HTTP {resp.status_code}{_error_name(resp)} (collection {collection})"
            )
        try:
            return resp.json()
        except ValueError:
            raise InternalError(f"{where} answered malformed JSON (collection {collection})") from None

    def _malformed(self, collection: str, what: str) -> InternalError:
        return InternalError(
            f"ChromaDB at {self.base_url} answered a malformed {what} (collection {collection})"
        )


def _first_row(body: Any, key: str) -> list[Any]:
    """Row 0 of a per-query list of lists (one query embedding is sent)."""
    rows = body[key]
    row = rows[0]
    if not isinstance(row, list):
        raise TypeError(key)
    return row


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _space(body: Mapping[str, Any]) -> str:
    """The collection's distance: its configuration (ChromaDB 1.x), else ``hnsw:space`` metadata."""
    config = body.get("configuration_json")
    hnsw = config.get("hnsw") if isinstance(config, dict) else None
    space = hnsw.get("space") if isinstance(hnsw, dict) else None
    if not isinstance(space, str):
        metadata = body.get("metadata")
        space = metadata.get("hnsw:space") if isinstance(metadata, dict) else None
    return space if space in ("cosine", "l2", "ip") else "l2"


def _error_name(resp: httpx.Response) -> str:
    """ChromaDB's error class (``InvalidArgumentError``), never its message (it may echo input)."""
    try:
        body = resp.json()
    except ValueError:
        return ""
    name = body.get("error") if isinstance(body, dict) else None
    if isinstance(name, str) and name.isidentifier() and len(name) <= _ERROR_NAME_MAX:
        return f" ({name})"
    return ""
