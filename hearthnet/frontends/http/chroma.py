"""The ChromaDB door: ChromaDB's v2 HTTP API, read-only, over every corpus and archive a caller may
search (on this node or any other of the mesh, through the bus).

Served behind :class:`~hearthnet.frontends.http.bearer.BearerDoor` (an API key, as the official
client's token auth sends it; ``heartbeat`` and ``version`` need none).  ``query`` is
``rag.query`` with the caller's vectors (dense, the corpus's own ranking), ``get`` is
``rag.get``; ``query_texts`` (sent by raw HTTP clients) are embedded with the collection's model
through ``embed.text``.  Every write is refused with Chroma's error and the way to add documents.
Shapes: :mod:`.chroma_shapes`; see ``specs/open_doors.md``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet.contracts.embed import decode_embeddings, embed_texts
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rag import PERSONAL, RagClient
from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.http import chroma_shapes as shapes
from hearthnet.frontends.http.bearer import Caller, GatedCalls
from hearthnet.frontends.http.gateway_answers import json_response, keyed_endpoint
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.json_input import loads_bounded

__all__ = ["ChromaState", "routes"]

PREFIX = "/api/v2"
DB = PREFIX + "/tenants/{tenant}/databases/{database}"
READ_ONLY = (
    "this node's ChromaDB API is read-only: add documents with 'hearthnet ingest FILE --corpus NAME' "
    "(or the web UI's Library), remove them with 'hearthnet docs delete'"
)


@dataclass
class ChromaState:
    bus: GatedBus


def _problem(problem: shapes.ChromaProblem) -> Response:
    return Response(
        shapes.chroma_error(problem.status, problem.name, problem.message),
        status_code=problem.status,
        media_type="application/json",
    )


Handler = Callable[[ChromaState, Request, GatedCalls], Awaitable[Response]]


def _endpoint(state: ChromaState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request, caller: Caller) -> Response:
        return await handler(state, request, GatedCalls(state.bus, caller))

    return keyed_endpoint(
        run,
        answer=_answer,
        no_key=lambda: shapes.ChromaProblem(401, "AuthError", "this route takes an API key"),
        problems=(shapes.ChromaProblem,),
    )


def _answer(exc: Exception) -> Response:
    if isinstance(exc, BusError):
        return _problem(shapes.error_of(exc))
    assert isinstance(exc, shapes.ChromaProblem)
    return _problem(exc)


async def _body(request: Request) -> dict[str, Any]:
    value = loads_bounded(await request.body())
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


def _scope(request: Request) -> None:
    """``NotFoundError`` for a tenant or database other than the default ones (the only ones here)."""
    tenant = request.path_params.get("tenant", shapes.TENANT)
    database = request.path_params.get("database", shapes.DATABASE)
    if tenant != shapes.TENANT:
        raise shapes.ChromaProblem(404, "NotFoundError", f"Tenant [{tenant[:100]}] not found")
    if database != shapes.DATABASE:
        raise shapes.ChromaProblem(404, "NotFoundError", f"Database [{database[:100]}] not found")


# -- the collections of the mesh ---------------------------------------------------------------------
async def collections(calls: GatedCalls) -> list[shapes.Collection]:
    """Every corpus and archive this caller may search, once each (the host advertising the most
    chunks), sorted by name; ``personal`` for the node's owner only."""
    status = await NodeClient(calls).status()
    names = {str(status.get("node_id")): str(status.get("name") or "")}
    names.update({str(p["node_id"]): str(p.get("name") or "") for p in status.get("peers", [])})
    dims: dict[str, int] = {}
    found: dict[str, shapes.Collection] = {}
    caps = status.get("capabilities", [])
    for cap in caps:
        params = cap.get("params") or {}
        if str(cap.get("capability", "")).startswith("embed.text@") and isinstance(params.get("dim"), int):
            dims.setdefault(str(params.get("model")), int(params["dim"]))
    for cap in caps:
        params = cap.get("params") or {}
        corpus = params.get("corpus")
        if not str(cap.get("capability", "")).startswith("rag.query@") or not isinstance(corpus, str):
            continue
        if corpus == PERSONAL and not calls.owner:
            continue
        chunks = params.get("chunks")
        if corpus in found and (found[corpus].chunks or 0) >= (chunks if isinstance(chunks, int) else 0):
            continue
        model = str(params.get("embedding_model") or "")
        node = str(cap.get("node"))
        found[corpus] = shapes.Collection(
            name=corpus,
            embedding_model=model,
            host=node,
            host_name=names.get(node, ""),
            chunks=chunks if isinstance(chunks, int) else None,
            documents=params.get("docs") if isinstance(params.get("docs"), int) else None,
            dimension=dims.get(model),
            read_only=bool(params.get("read_only")),
            collection_name=params.get("collection_name") if params.get("read_only") else None,
            label=params.get("label") if isinstance(params.get("label"), str) else None,
        )
    return [found[n] for n in sorted(found)]


async def _collection(calls: GatedCalls, wanted: str) -> shapes.Collection:
    for col in await collections(calls):
        if col.answers_to(wanted):
            return col
    raise shapes.ChromaProblem(404, "NotFoundError", f"Collection [{wanted[:200]}] does not exist")


# -- handlers ----------------------------------------------------------------------------------------
async def _heartbeat(request: Request) -> Response:
    return json_response({"nanosecond heartbeat": time.time_ns()})


async def _version(request: Request) -> Response:
    return json_response(shapes.VERSION)


async def _preflight(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    return json_response({"max_batch_size": 1000, "supports_base64_encoding": False})


async def _identity(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    return json_response(
        {"user_id": calls.caller.name, "tenant": shapes.TENANT, "databases": [shapes.DATABASE]}
    )


async def _tenant(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    return json_response({"name": shapes.TENANT, "resource_name": None})


def _database_model() -> dict[str, Any]:
    return {"id": shapes.DATABASE_ID, "name": shapes.DATABASE, "tenant": shapes.TENANT}


async def _databases(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    return json_response([_database_model()])


async def _database(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    return json_response(_database_model())


def _page_params(request: Request) -> tuple[int | None, int]:
    def number(key: str) -> int | None:
        raw = request.query_params.get(key)
        if raw is None or raw == "":
            return None
        if not raw.isdigit():
            raise BadRequest(f"{key} must be a non-negative integer")
        return int(raw)

    return number("limit"), number("offset") or 0


async def _list(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    limit, offset = _page_params(request)
    cols = (await collections(calls))[offset:]
    if limit is not None:
        cols = cols[:limit]
    return json_response([c.model() for c in cols])


async def _count_collections(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    return json_response(len(await collections(calls)))


async def _get_collection(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    return json_response((await _collection(calls, request.path_params["name"])).model())


async def _count(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    col = await _collection(calls, request.path_params["name"])
    return json_response(col.chunks or 0)


async def _get(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    col = await _collection(calls, request.path_params["name"])
    req = shapes.parse_get(await _body(request))
    rag = RagClient(calls)
    rows: list[dict[str, Any]] = []
    want = req.limit if req.limit is not None else shapes.MAX_GET_ALL + 1
    offset = req.offset
    while len(rows) < want:
        page = min(1000, want - len(rows))
        got = await rag.get(
            col.name,
            ids=req.ids,
            filter=req.where,
            contains=req.contains,
            limit=page,
            offset=offset,
            include_text="documents" in req.include,
            include_embeddings="embeddings" in req.include,
        )
        rows.extend(got)
        offset += page
        if len(got) < page:
            break
    if req.limit is None and len(rows) > shapes.MAX_GET_ALL:
        raise BadRequest(
            f"collection {col.name} has more than {shapes.MAX_GET_ALL} matching chunks: give a limit "
            "and an offset to read them a page at a time"
        )
    return json_response(
        {
            "ids": [r["chunk_id"] for r in rows],
            "embeddings": [r.get("embedding") for r in rows] if "embeddings" in req.include else None,
            "documents": [r.get("text") for r in rows] if "documents" in req.include else None,
            "uris": None,
            "metadatas": [shapes.flat_metadata(r.get("metadata") or {}) for r in rows]
            if "metadatas" in req.include
            else None,
            "include": req.include,
        }
    )


async def _query_vectors(
    calls: GatedCalls, col: shapes.Collection, req: shapes.QueryRequest
) -> list[list[float]]:
    if req.embeddings is not None:
        return req.embeddings
    assert req.texts is not None
    result = await embed_texts(calls, col.embedding_model, req.texts)
    return [[float(x) for x in row] for row in decode_embeddings(result.output)]


async def _query(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    _scope(request)
    col = await _collection(calls, request.path_params["name"])
    req = shapes.parse_query(await _body(request))
    rag = RagClient(calls)
    answers: list[list[dict[str, Any]]] = []
    for vector in await _query_vectors(calls, col, req):
        result = await rag.query(
            col.name,
            "",
            k=req.n_results,
            filter=req.where,
            include_text="documents" in req.include,
            embedding=vector,
        )
        answers.append(list(result.output.get("chunks") or []))
    vectors: dict[str, Any] = {}
    if "embeddings" in req.include:
        ids = sorted({str(h["metadata"]["chunk_id"]) for hits in answers for h in hits})
        if ids:
            got = await rag.get(
                col.name, ids=ids, limit=len(ids), include_text=False, include_embeddings=True
            )
            vectors = {r["chunk_id"]: r.get("embedding") for r in got}

    def each(make: Callable[[dict[str, Any]], Any]) -> list[list[Any]]:
        return [[make(h) for h in hits] for hits in answers]

    return json_response(
        {
            "ids": each(lambda h: h["metadata"]["chunk_id"]),
            "embeddings": each(lambda h: vectors.get(h["metadata"]["chunk_id"]))
            if "embeddings" in req.include
            else None,
            "documents": each(lambda h: h.get("text")) if "documents" in req.include else None,
            "uris": None,
            "metadatas": each(lambda h: shapes.flat_metadata(h.get("metadata") or {}))
            if "metadatas" in req.include
            else None,
            "distances": each(lambda h: round(1.0 - float(h.get("similarity", h.get("score", 0.0))), 6))
            if "distances" in req.include
            else None,
            "include": req.include,
        }
    )


async def _create(state: ChromaState, request: Request, calls: GatedCalls) -> Response:
    """``create_collection``: refused (read-only), but ``get_or_create`` of a collection that exists
    is a read, answered with it (LangChain's Chroma store opens its collection that way)."""
    _scope(request)
    body = await _body(request)
    name = body.get("name")
    if body.get("get_or_create") is True and isinstance(name, str):
        for col in await collections(calls):
            if col.answers_to(name):
                return json_response(col.model())
    raise shapes.ChromaProblem(403, "AuthorizationError", READ_ONLY)


async def _refuse(request: Request) -> Response:
    return _problem(shapes.ChromaProblem(403, "AuthorizationError", READ_ONLY))


def routes(state: ChromaState) -> list[BaseRoute]:
    def r(path: str, handler: Handler, method: str = "GET") -> Route:
        return Route(path, _endpoint(state, handler), methods=[method])

    col = DB + "/collections/{name}"
    writes = [
        (PREFIX + "/reset", ["POST"]),
        (PREFIX + "/tenants", ["POST"]),
        (PREFIX + "/tenants/{tenant}", ["PATCH", "PUT", "DELETE"]),
        (PREFIX + "/tenants/{tenant}/databases", ["POST"]),
        (DB, ["DELETE", "PUT", "PATCH"]),
        (col, ["PUT", "DELETE", "PATCH"]),
        *((col + "/" + op, ["POST"]) for op in ("add", "upsert", "update", "delete", "fork", "search")),
    ]
    return [
        Route(PREFIX + "/heartbeat", _heartbeat, methods=["GET"]),
        Route(PREFIX + "/version", _version, methods=["GET"]),
        r(PREFIX + "/pre-flight-checks", _preflight),
        r(PREFIX + "/auth/identity", _identity),
        r(PREFIX + "/tenants/{tenant}", _tenant),
        r(PREFIX + "/tenants/{tenant}/databases", _databases),
        r(DB, _database),
        r(DB + "/collections", _list),
        r(DB + "/collections", _create, "POST"),
        r(DB + "/collections_count", _count_collections),
        r(col, _get_collection),
        r(DB + "/collections/by-id/{name}", _get_collection),
        r(col + "/count", _count),
        r(col + "/get", _get, "POST"),
        r(col + "/query", _query, "POST"),
        *(Route(path, _refuse, methods=methods) for path, methods in writes),
    ]
