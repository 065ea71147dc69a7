"""The OpenAI-compatible gateway: ``/v1/models``, ``/v1/embeddings``, ``/v1/chat/completions``.

Served on the web UI's server behind :class:`~hearthnet.frontends.http.bearer.BearerDoor`, so
every handler has a caller (a token's level) and a bounded body.  Each capability is called
through :class:`~hearthnet.frontends.http.policy.GatedBus` with that level.

- ``/v1/models``: every ``llm.chat`` and ``embed.text`` model of the mesh (``node.status``).
- ``/v1/embeddings``: ``embed.text`` (normalised vectors), as a TEI server answers it too.
- ``/v1/chat/completions``: ``llm.chat`` (streamed or not); with ``corpora`` or
  ``rag_config`` the answer is ``answer.ask``'s, its citations checked as it streams (the
  deltas joined are the content unstreamed), and its sources ride in an extra ``hearthnet``
  field (the last chunk's, when streamed).

A request's model is looked up before anything runs (``404 model_not_found``).  Bus errors
become OpenAI errors with the status of :data:`.gateway_answers.STATUS`; a ``Retry-After``
comes from the error's ``retry_after_ms``.  An error before the first chunk of a stream is an
ordinary error answer; after it, an ``error`` event ends the stream.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet.contracts.answer import AnswerClient, AskInput
from hearthnet.contracts.embed import CAPABILITY as EMBED
from hearthnet.contracts.embed import embed_texts
from hearthnet.contracts.llm import CAPABILITY as CHAT
from hearthnet.contracts.llm import LlmClient
from hearthnet.contracts.node import NodeClient
from hearthnet.errors import BadRequest, BusError, NotFound, Unauthorized
from hearthnet.frontends.client.corpora import requested_corpora, searchable_corpora
from hearthnet.frontends.http import completions
from hearthnet.frontends.http import openai_shapes as shapes
from hearthnet.frontends.http.bearer import Caller, GatedCalls, openai_error_body
from hearthnet.frontends.http.gateway_answers import (
    Chunks,
    Emit,
    GatewayCall,
    ModelNotFound,
    Producer,
    error_response,
    json_response,
    keyed_endpoint,
)
from hearthnet.frontends.http.last_resort import LastResort, programs_door, programs_shape
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.json_input import loads_bounded

__all__ = ["GatewayState", "build", "mesh_models", "routes"]


@dataclass
class GatewayState:
    bus: GatedBus
    node_name: str
    closing: anyio.Event
    started: int
    """When this node started (Unix seconds): the ``created`` of its models."""


async def _body(request: Request) -> dict[str, Any]:
    value = loads_bounded(await request.body())
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


Handler = Callable[[GatewayState, Request, Caller], Awaitable[Response]]


def _endpoint(state: GatewayState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request, caller: Caller) -> Response:
        return await handler(state, request, caller)

    return keyed_endpoint(run, answer=_bus_error, no_key=lambda: Unauthorized("no API key"))


def _bus_error(exc: Exception) -> Response:
    assert isinstance(exc, BusError)  # the gateway has no problems of its own
    return error_response(exc)


# -- models -----------------------------------------------------------------------------------
async def mesh_models(state: GatewayState, caller: Caller) -> list[dict[str, Any]]:
    """Every ``llm.chat`` and ``embed.text`` model of the mesh, once each: OpenAI's model objects
    with a ``hearthnet`` field (kind, the serving nodes, window or dimensions)."""
    status = await NodeClient(state.bus.login(caller.level)).status()
    own = str(status.get("node_id"))
    names = {own: state.node_name, **{p["node_id"]: p.get("name") or "" for p in status.get("peers", [])}}
    found: dict[str, dict[str, Any]] = {}
    for cap in status.get("capabilities", []):
        ref = cap.get("capability")
        kind = {f"{CHAT}@1.0": "chat", f"{EMBED}@1.0": "embedding"}.get(ref)
        params = cap.get("params") or {}
        model = params.get("model")
        if kind is None or not isinstance(model, str) or not model:
            continue
        node = str(cap.get("node"))
        entry = found.setdefault(
            model,
            {
                "id": model,
                "object": "model",
                "created": state.started,
                "owned_by": "",
                "hearthnet": {"kinds": [], "nodes": []},
            },
        )
        extra = entry["hearthnet"]
        if kind not in extra["kinds"]:
            extra["kinds"].append(kind)
        if node not in [n["node_id"] for n in extra["nodes"]]:
            extra["nodes"].append({"node_id": node, "name": names.get(node, "")})
        for key in ("context_tokens", "max_output_tokens", "dim", "max_tokens"):
            if key in params:
                extra[key] = params[key]
    for entry in found.values():
        nodes = sorted(
            entry["hearthnet"]["nodes"], key=lambda n: (n["node_id"] != own, n["name"], n["node_id"])
        )
        entry["hearthnet"]["nodes"] = nodes
        entry["owned_by"] = nodes[0]["name"] or nodes[0]["node_id"]
    return [found[m] for m in sorted(found)]


async def _models(state: GatewayState, request: Request, caller: Caller) -> Response:
    return json_response({"object": "list", "data": await mesh_models(state, caller)})


async def _model(state: GatewayState, request: Request, caller: Caller) -> Response:
    wanted = request.path_params["model"]
    for entry in await mesh_models(state, caller):
        if entry["id"] == wanted:
            return json_response(entry)
    raise ModelNotFound(f"the model {wanted[:200]!r} does not exist in this mesh (GET /v1/models)")


async def _require_model(state: GatewayState, caller: Caller, model: str, kind: str) -> None:
    for entry in await mesh_models(state, caller):
        if entry["id"] == model and kind in entry["hearthnet"]["kinds"]:
            return
    what = "chat" if kind == "chat" else "embedding"
    raise ModelNotFound(f"no {what} model {model[:200]!r} in this mesh (GET /v1/models lists them)")


# -- embeddings -------------------------------------------------------------------------------
async def _embeddings(state: GatewayState, request: Request, caller: Caller) -> Response:
    req = shapes.parse_embeddings(await _body(request))
    try:
        result = await embed_texts(state.bus.login(caller.level), req.model, req.texts)
    except NotFound as exc:
        raise ModelNotFound(
            f"no embedding model {req.model[:200]!r} in this mesh (GET /v1/models lists them)"
        ) from exc
    vectors = shapes.decode_embeddings(result.output, len(req.texts))
    if req.dimensions is not None and req.dimensions != vectors.shape[1]:
        raise BadRequest(
            f"dimensions: {req.model} gives {vectors.shape[1]}-dimensional vectors; "
            f"{req.dimensions} cannot be served (leave dimensions out)"
        )
    tokens = result.meta.get("tokens")
    return json_response(
        shapes.embeddings_response(
            req.model,
            vectors,
            as_base64=req.base64,
            prompt_tokens=tokens if type(tokens) is int and tokens >= 0 else 0,
        )
    )


# -- chat -------------------------------------------------------------------------------------
async def _chat(state: GatewayState, request: Request, caller: Caller) -> Response:
    req = shapes.parse_chat(await _body(request))
    await _require_model(state, caller, req.model, "chat")
    cid = "chatcmpl-" + secrets.token_hex(12)
    created = int(time.time())
    if req.rag:
        inp = await _ask_input(state, caller, req)
        return GatewayCall(_rag_producer(state, caller, req, inp, cid, created), state.closing, req.stream)
    return GatewayCall(_llm_producer(state, caller, req, cid, created), state.closing, req.stream)


def _llm_producer(
    state: GatewayState, caller: Caller, req: shapes.ChatRequest, cid: str, created: int
) -> Producer:
    async def produce(emit: Emit) -> dict[str, Any] | None:
        llm = LlmClient(state.bus.login(caller.level))
        fields: dict[str, Any] = {
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "stop": req.stop,
        }
        if not req.stream:
            result = await llm.chat(req.model, req.messages, **fields)
            out = result.output
            return shapes.completion(
                cid,
                created,
                req.model,
                _content(out),
                str(out.get("finish_reason") or "stop"),
                shapes.usage_of(out.get("usage")),
            )
        chunks = Chunks(emit, cid, created, req.model, req.include_usage)
        async with llm.chatting(req.model, req.messages, **fields) as call:
            async for frame in call.frames():
                delta = frame.get("delta")
                if isinstance(delta, str) and delta:
                    await chunks.text(delta)
            result = await call.result()
        out = result.output
        if not chunks.sent_text and _content(out):  # a provider that answered without streaming
            await chunks.text(_content(out))
        await chunks.finish(str(out.get("finish_reason") or "stop"), shapes.usage_of(out.get("usage")))
        return None

    return produce


async def _ask_input(state: GatewayState, caller: Caller, req: shapes.ChatRequest) -> AskInput:
    question, turns = req.question_and_history()
    corpora: list[str] | None = None
    no_rag: bool | None = None
    if req.corpora is not None:
        calls = GatedCalls(state.bus, caller)
        corpora = requested_corpora(calls, req.corpora) if req.corpora else await searchable_corpora(calls)
        if not corpora and not req.archives:
            no_rag = True  # nothing this caller may search: the model answers alone
    return AskInput(
        question,
        model=req.model,
        debug=False,
        history=[{"question": t.question, "answer": t.answer} for t in turns] or None,
        archives=req.archives or None,
        corpora=corpora or None,
        no_rag=no_rag,
        max_tokens=req.max_tokens,
        temperature=req.temperature,
    )


def _extension(out: Mapping[str, Any]) -> dict[str, Any]:
    meta = out.get("meta") if isinstance(out.get("meta"), dict) else {}
    assert isinstance(meta, dict)
    return {
        "mode": out.get("mode"),
        "citations": out.get("citations", []),
        "sources": out.get("sources", []),
        "rag": meta.get("rag"),
        "corpora": meta.get("corpora", {}),
        "model": meta.get("model"),
    }


def _rag_usage(out: Mapping[str, Any]) -> dict[str, int]:
    meta = out.get("meta") if isinstance(out.get("meta"), dict) else {}
    assert isinstance(meta, dict)
    return shapes.usage_of(meta.get("usage")) or {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    }


def _rag_producer(
    state: GatewayState, caller: Caller, req: shapes.ChatRequest, inp: AskInput, cid: str, created: int
) -> Producer:
    async def produce(emit: Emit) -> dict[str, Any] | None:
        answers = AnswerClient(state.bus.login(caller.level))
        if not req.stream:
            out = (await answers.ask(inp)).output
            return shapes.completion(
                cid,
                created,
                req.model,
                str(out.get("answer") or ""),
                "stop",
                _rag_usage(out),
                _extension(out),
            )
        chunks = Chunks(emit, cid, created, req.model, req.include_usage)
        async with answers.asking(inp) as call:
            async for frame in call.frames():
                delta = frame.get("delta")
                if isinstance(delta, str) and delta:
                    await chunks.text(delta)
            out = (await call.result()).output
        await chunks.finish("stop", _rag_usage(out), _extension(out))
        return None

    return produce


def _content(out: Mapping[str, Any]) -> str:
    message = out.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


# -- legacy completions ----------------------------------------------------------------------
async def _completions(state: GatewayState, request: Request, caller: Caller) -> Response:
    """``/v1/completions``: the prompt asked of the chat model, answered as ``text_completion``."""
    req = shapes.parse_chat(completions.chat_body(await _body(request)))
    await _require_model(state, caller, req.model, "chat")
    inner = _llm_producer(state, caller, req, "chatcmpl-" + secrets.token_hex(12), int(time.time()))

    async def produce(emit: Emit) -> dict[str, Any] | None:
        async def as_text(doc: dict[str, Any]) -> None:
            await emit(completions.text_completion(doc))

        out = await inner(as_text)
        return None if out is None else completions.text_completion(out)

    return GatewayCall(produce, state.closing, req.stream)


# -- the application --------------------------------------------------------------------------
async def _not_found(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 404
    message = "no such route" if status == 404 else f"{request.method} is not allowed here"
    return Response(
        openai_error_body(status, message, "not_found" if status == 404 else "method_not_allowed"),
        status_code=status,
        media_type="application/json",
    )


def routes(state: GatewayState) -> list[BaseRoute]:
    def r(path: str, handler: Handler, method: str) -> Route:
        return Route(path, _endpoint(state, handler), methods=[method])

    return [
        r("/v1/models", _models, "GET"),
        r("/v1/models/{model:path}", _model, "GET"),
        r("/v1/embeddings", _embeddings, "POST"),
        r("/v1/chat/completions", _chat, "POST"),
        r("/v1/completions", _completions, "POST"),
    ]


def build(state: GatewayState, extra: list[BaseRoute]) -> Starlette:
    """The programs' application: the gateway's routes and ``extra`` (the MCP endpoint); unknown
    routes and methods answered in OpenAI's error shape."""
    return Starlette(
        routes=[*routes(state), *extra],
        exception_handlers={404: _not_found, 405: _not_found},
        middleware=[Middleware(LastResort, shape=programs_shape, door=programs_door)],
    )
