"""Text Embeddings Inference's routes over the mesh: ``POST /embed``, ``GET /info``, ``POST /rerank``
(and ``GET /health``), with TEI's request and error shapes, so a program written for a TEI
server embeds and reranks through the node.

Served behind :class:`~hearthnet.frontends.http.bearer.BearerDoor` like the gateway (an API key in
``Authorization: Bearer``, or ``/t/<key>/embed`` for a client that sends no header).  The model
is the one this node embeds with (a TEI server serves one); ``/embed`` is ``embed.text``,
``/rerank`` is ``rerank.text`` of any node of the mesh.  Errors: ``{error, error_type}`` with TEI's
statuses (413 and 422 ``Validation``, 424 ``Backend``, 429 ``Overloaded``, 503 ``Unhealthy``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from hearthnet import __version__
from hearthnet.contracts.embed import MAX_TEXT_CHARS, MAX_TEXTS, decode_embeddings, embed_texts
from hearthnet.contracts.node import NodeClient
from hearthnet.contracts.rerank import rerank_texts
from hearthnet.errors import BadRequest, BusError, NotFound
from hearthnet.frontends.http.bearer import Caller, GatedCalls
from hearthnet.frontends.http.gateway_answers import json_response, keyed_endpoint
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.json_input import loads_bounded

__all__ = ["TeiState", "routes", "tei_error"]

_STATUS: Final[Mapping[str, tuple[int, str]]] = {
    "bad_request": (422, "Validation"),
    "schema_mismatch": (422, "Validation"),
    "unauthorized": (401, "Unauthorized"),
    "revoked": (401, "Unauthorized"),
    "not_found": (424, "Backend"),
    "capacity_exceeded": (429, "Overloaded"),
    "rate_limited": (429, "Overloaded"),
    "partition": (503, "Unhealthy"),
    "timeout": (503, "Unhealthy"),
}


class TeiProblem(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def tei_error(status: int, message: str, kind: str) -> bytes:
    """An error in TEI's shape."""
    return json.dumps({"error": message, "error_type": kind}, ensure_ascii=False).encode()


@dataclass
class TeiState:
    bus: GatedBus
    model: str
    """The model ``/embed`` and ``/info`` serve: this node's embedding model."""


Handler = Callable[[TeiState, Request, GatedCalls], Awaitable[Response]]


def _endpoint(state: TeiState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def run(request: Request, caller: Caller) -> Response:
        return await handler(state, request, GatedCalls(state.bus, caller))

    return keyed_endpoint(
        run,
        answer=_problem,
        no_key=lambda: TeiProblem(401, "Unauthorized", "this route takes an API key"),
        problems=(TeiProblem,),
    )


def _problem(exc: Exception) -> Response:
    """A :class:`TeiProblem`, or a bus error as TEI would say it, in TEI's shape."""
    if isinstance(exc, BusError):
        status, kind = _STATUS.get(exc.code, (500, "Backend"))
        message = exc.message if exc.code != "internal_error" else exc.message[:300]
        exc = TeiProblem(status, kind, message)
    assert isinstance(exc, TeiProblem)
    return Response(
        tei_error(exc.status, exc.message, exc.kind), status_code=exc.status, media_type="application/json"
    )


async def _body(request: Request) -> dict[str, Any]:
    try:
        value = loads_bounded(await request.body())
    except BadRequest as exc:
        raise TeiProblem(422, "Validation", exc.message) from exc
    if not isinstance(value, dict):
        raise TeiProblem(422, "Validation", "the request body must be a JSON object")
    return value


def _flag(body: Mapping[str, Any], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise TeiProblem(422, "Validation", f"{key} must be true or false")
    return value


def _inputs(value: Any) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise TeiProblem(422, "Validation", "inputs must be a string or a list of strings")
    if not texts:
        raise TeiProblem(422, "Validation", "`inputs` cannot be empty")
    if len(texts) > MAX_TEXTS:
        raise TeiProblem(
            413, "Validation", f"batch size {len(texts)} > maximum allowed batch size {MAX_TEXTS}"
        )
    for text in texts:
        if len(text) > MAX_TEXT_CHARS:
            raise TeiProblem(
                413, "Validation", f"an input has {len(text)} characters; at most {MAX_TEXT_CHARS}"
            )
    return texts


async def _window(calls: GatedCalls, model: str) -> tuple[int | None, int | None]:
    """The model's ``(max_tokens, dim)`` as its ``embed.text`` providers advertise them."""
    status = await NodeClient(calls).status()
    for cap in status.get("capabilities", []):
        params = cap.get("params") or {}
        if str(cap.get("capability", "")).startswith("embed.text@") and params.get("model") == model:
            tokens, dim = params.get("max_tokens"), params.get("dim")
            return (tokens if isinstance(tokens, int) else None, dim if isinstance(dim, int) else None)
    raise NotFound(f"no node of the mesh serves the embedding model {model}")


async def _info(state: TeiState, request: Request, calls: GatedCalls) -> Response:
    max_tokens, dim = await _window(calls, state.model)
    return json_response(
        {
            "model_id": state.model,
            "model_sha": None,
            "model_dtype": "float32",
            "model_type": {"embedding": {"pooling": "mean"}},
            "max_concurrent_requests": 512,
            "max_input_length": max_tokens or 512,
            "max_batch_tokens": (max_tokens or 512) * MAX_TEXTS,
            "max_batch_requests": None,
            "max_client_batch_size": MAX_TEXTS,
            "tokenization_workers": 1,
            "version": __version__,
            "sha": None,
            "docker_label": None,
            "hearthnet": {"dim": dim},
        }
    )


async def _embed(state: TeiState, request: Request, calls: GatedCalls) -> Response:
    body = await _body(request)
    texts = _inputs(body.get("inputs"))
    normalize = _flag(body, "normalize", True)
    truncate = _flag(body, "truncate", False)
    result = await embed_texts(calls, state.model, texts, normalize=normalize)
    truncated = result.meta.get("truncated")
    if not truncate and isinstance(truncated, int | bool) and truncated:
        max_tokens, _ = await _window(calls, state.model)
        raise TeiProblem(
            413,
            "Validation",
            f"Input validation error: `inputs` must have less than {max_tokens} tokens "
            "(send truncate: true to cut them)",
        )
    vectors = decode_embeddings(result.output)
    return json_response([[float(x) for x in row] for row in vectors])


async def _rerank(state: TeiState, request: Request, calls: GatedCalls) -> Response:
    body = await _body(request)
    query, texts = body.get("query"), body.get("texts")
    if not isinstance(query, str) or not query.strip():
        raise TeiProblem(422, "Validation", "query must be a non-empty string")
    texts = _inputs(texts)
    return_text = _flag(body, "return_text", False)
    _flag(body, "raw_scores", False)
    scores = await rerank_texts(calls, query, texts)
    ranked = sorted(range(len(texts)), key=lambda i: -float(scores[i]))
    out = []
    for i in ranked:
        item: dict[str, Any] = {"index": i, "score": float(scores[i])}
        if return_text:
            item["text"] = texts[i]
        out.append(item)
    return json_response(out)


async def _embed_all(state: TeiState, request: Request, calls: GatedCalls) -> Response:
    raise TeiProblem(
        424,
        "Backend",
        "this node serves pooled embeddings only: use POST /embed (token embeddings are not offered)",
    )


async def _health(state: TeiState, request: Request, calls: GatedCalls) -> Response:
    await _window(calls, state.model)
    return Response(b"", status_code=200)


def routes(state: TeiState) -> list[BaseRoute]:
    def r(path: str, handler: Handler, method: str) -> Route:
        return Route(path, _endpoint(state, handler), methods=[method])

    return [
        r("/info", _info, "GET"),
        r("/health", _health, "GET"),
        r("/embed", _embed, "POST"),
        r("/embed_all", _embed_all, "POST"),
        r("/rerank", _rerank, "POST"),
    ]
