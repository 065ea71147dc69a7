"""The door of the programs' routes (``/v1/*``, ``/mcp``): API keys, a rate per key, bounded bodies.

The OpenAI-compatible gateway and the MCP server share the web UI's server, but not its way
in: a program presents ``Authorization: Bearer <token>``, a token ``hearthnet ui token create``
made, and nothing else.  The browser's session cookie is an *ambient* credential (a page of any
site can make the browser send it), so it never authorises one of these routes; neither do
CSRF tokens matter here, since a bearer key is never sent by a browser on its own.

For a client that can set no header (the seeds' runtime calls ``{url}/v1/embeddings`` with
no ``Authorization``), the key may instead lead the path: ``/t/<token>/v1/...``.

In order, after the guard's Host check (``security.Guard``): the key (missing or unknown:
``401``; a revoked one is unknown at the next request), the key's rate (a token bucket per
key: ``429`` with ``Retry-After``), the body's size (declared or counted: ``413``, the body
never read whole past its bound).  Errors have OpenAI's shape ``{error: {message, type, param,
code}}``.  A handler finds the caller in ``scope["hn.caller"]`` and the body already read.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio
import structlog

from hearthnet.bus.context import CallResult
from hearthnet.community.levels import Level
from hearthnet.errors import DiskFull
from hearthnet.frontends.http.asgi import (
    ASGIApp,
    HttpMiddleware,
    Message,
    Receive,
    Scope,
    Send,
    request_headers,
)
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.http.tokens import TokenInfo, TokenStore, digest
from hearthnet.frontends.json_input import MAX_JSON_DEPTH, json_deeper
from hearthnet.runtime.log_summary import LogSummary

__all__ = [
    "BODY_LIMITS",
    "BearerDoor",
    "BearerTokens",
    "Caller",
    "GatedCalls",
    "TokenBucket",
    "is_bearer_path",
    "jsonrpc_error_body",
    "openai_error_body",
]

log = structlog.get_logger("hearthnet.ui")
_REFUSED = LogSummary(log.info, "api_key_refused", first=5, window=60.0)
"""Wrong keys from one client address: the first few logged a minute, the rest counted."""


MiB = 1 << 20
BODY_LIMITS: Final[Mapping[str, int]] = {
    "/v1/chat/completions": MiB,
    "/v1/completions": MiB,
    "/v1/embeddings": 4 * MiB,  # 256 texts of 8,192 characters, JSON-escaped
    "/mcp": MiB,
}
"""The largest request body of each route; any other is bounded by ``DEFAULT_BODY_LIMIT``."""
DEFAULT_BODY_LIMIT = 64 * 1024
PATH_TOKEN = "/t/"
MAX_TOKEN = 256
TOUCH_SECONDS = 60.0
"""A key's ``last_used`` is written at most this often."""


CHROMA_PREFIX = "/api/v2"
TEI_PATHS = frozenset({"/embed", "/embed_all", "/info", "/rerank", "/health"})
PUBLIC_PATHS = frozenset({CHROMA_PREFIX + "/heartbeat", CHROMA_PREFIX + "/version"})
"""Program routes that need no key (ChromaDB's liveness checks: they tell nothing)."""


def is_bearer_path(path: str) -> bool:
    """Whether ``path`` belongs to the programs' door rather than the web UI."""
    return (
        path in ("/v1", "/mcp", CHROMA_PREFIX)
        or path in TEI_PATHS
        or path.startswith(("/v1/", "/mcp/", CHROMA_PREFIX + "/", PATH_TOKEN))
    )


def _door(path: str) -> str:
    """Whose error shape a program route answers in: ``chroma``, ``tei`` or ``openai``."""
    if path == CHROMA_PREFIX or path.startswith(CHROMA_PREFIX + "/"):
        return "chroma"
    if path in TEI_PATHS:
        return "tei"
    if path == "/mcp" or path.startswith("/mcp/"):
        return "mcp"
    return "openai"


_CHROMA_NAMES: Final[Mapping[int, str]] = {401: "AuthError", 403: "AuthorizationError", 429: "RateLimitError"}
_TEI_KINDS: Final[Mapping[int, str]] = {401: "Unauthorized", 429: "Overloaded"}


def door_error_body(path: str, status: int, message: str, code: str | None = None) -> bytes:
    """An error of the door's own shape: ChromaDB's ``{error, message}``, TEI's ``{error,
    error_type}``, a JSON-RPC error on ``/mcp`` (what the MCP client reads), else OpenAI's."""
    door = _door(path)
    if door == "chroma":
        name = _CHROMA_NAMES.get(status, "InvalidArgumentError" if status < 500 else "InternalError")
        return json.dumps({"error": name, "message": message}, ensure_ascii=False).encode()
    if door == "tei":
        kind = _TEI_KINDS.get(status, "Validation" if status < 500 else "Backend")
        return json.dumps({"error": message, "error_type": kind}, ensure_ascii=False).encode()
    if door == "mcp":
        return jsonrpc_error_body(code or "bad_request", message)
    return openai_error_body(status, message, code)


@dataclass(frozen=True)
class Caller:
    """Who a program's request comes from: a person's token (member or trusted), or the owner."""

    token_id: str
    name: str
    level: Level
    owner: bool = False


@dataclass(frozen=True)
class GatedCalls:
    """One caller's calls through the gated bus (``frontends.client.corpora.Calls``): its level applied."""

    bus: GatedBus
    caller: Caller

    @property
    def owner(self) -> bool:
        return self.caller.owner

    @property
    def key(self) -> str:
        return "owner" if self.caller.owner else self.caller.token_id

    async def call(self, capability: str, **call: Any) -> CallResult:
        return await self.bus.call(self.caller.level, capability, **call)


class TokenBucket:
    """Requests per key: ``burst`` at once, refilled at ``per_minute`` (pure; the clock is injected).

    At most ``max_keys`` buckets are kept (least recently used out): a forgotten key starts full
    again, which costs at most one burst.
    """

    def __init__(
        self,
        per_minute: int,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 4096,
    ) -> None:
        if per_minute < 1 or burst < 1:
            raise ValueError("a rate and a burst of at least 1")
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """``0.0`` if ``key`` may make a request now (one is counted), else the seconds to wait."""
        now = self._clock()
        level, then = self._buckets.pop(key, (self.burst, now))
        level = min(self.burst, level + (now - then) * self.rate)
        wait = 0.0
        if level >= 1.0:
            level -= 1.0
        else:
            wait = (1.0 - level) / self.rate
        self._buckets[key] = (level, now)
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)
        return wait


class BearerTokens:
    """The keys in memory, read again whenever the token store's file changes (as
    :class:`~hearthnet.frontends.http.sessions.SessionCache` does for sessions)."""

    def __init__(self, store: TokenStore) -> None:
        self._store = store
        self._tokens: dict[str, TokenInfo] = {}
        self._counter = b""
        self._lock = anyio.Lock()
        self._limiter = anyio.CapacityLimiter(1)
        self._touched: dict[str, float] = {}

    async def lookup(self, secret: str) -> TokenInfo | None:
        """The live token whose secret this is, or ``None``."""
        if not secret or len(secret) > MAX_TOKEN:
            return None
        if self._store.change_counter() != self._counter:
            async with self._lock:
                counter = self._store.change_counter()
                if counter != self._counter:
                    self._tokens = await anyio.to_thread.run_sync(
                        self._store.bearer_tokens, limiter=self._limiter
                    )
                    self._counter = counter
        token = self._tokens.get(digest(secret))
        if token is None:
            return None
        now = time.time()
        if now - self._touched.get(token.id, 0.0) >= TOUCH_SECONDS:
            self._touched[token.id] = now
            with contextlib.suppress(DiskFull):  # a note of when it was used: not worth refusing over
                await anyio.to_thread.run_sync(self._store.touch, token.id, limiter=self._limiter)
        return token


ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}
"""OpenAI's error ``type`` of a status (5xx: ``server_error``)."""


def openai_error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> bytes:
    """An error in OpenAI's shape, as the body of a response of ``status``."""
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    doc = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return json.dumps(doc, ensure_ascii=False).encode()


JSONRPC_CODES: Final[Mapping[str, int]] = {
    "bad_request": -32600,
    "schema_mismatch": -32600,
    "internal_error": -32603,
}
"""JSON-RPC's error code of a bus error (any other: -32000, a server error); the bus code rides in
``data.error``."""


def jsonrpc_error_body(code: str, message: str, *, parse_error: bool = False) -> bytes:
    """A JSON-RPC error answer (the ``/mcp`` door's shape) to a request whose id is unknown: it
    failed before it was read."""
    number = -32700 if parse_error else JSONRPC_CODES.get(code, -32000)
    error = {"code": number, "message": message, "data": {"error": code}}
    return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}, ensure_ascii=False).encode()


async def send_error(
    send: Send,
    status: int,
    message: str,
    code: str | None = None,
    *,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    path: str = "/v1",
) -> None:
    body = (
        door_error_body(path, status, message, code)
        if param is None
        else openai_error_body(status, message, code, param)
    )
    out = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    out += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


class BearerDoor(HttpMiddleware):
    """Pure ASGI in front of the gateway and MCP routes (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, tokens: BearerTokens, bucket: TokenBucket) -> None:
        super().__init__(app)
        self._tokens = tokens
        self._bucket = bucket

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        try:
            token = await self._admit(scope, headers)
            if token is None:  # a public route (ChromaDB's heartbeat): no key, no body
                await self.app(scope, receive, send)
                return
            limit = BODY_LIMITS.get(scope["path"], DEFAULT_BODY_LIMIT)
            declared = headers.get(b"content-length")
            if declared is not None and (not declared.isdigit() or int(declared) > limit):
                raise _TooLarge
            body = await _read_body(receive, limit)
        except _Refused as refused:
            await send_error(send, *refused.args, path=scope["path"], headers=refused.headers)
            return
        except _TooLarge:
            message = f"the request body is over {limit} bytes, this route's limit"
            await send_error(send, 413, message, "request_too_large", path=scope["path"])
            return
        if body is None:
            return  # the client went away
        if json_deeper(body):
            await _send_too_deep(scope["path"], send)
            return
        scope["hn.caller"] = Caller(token.id, token.name, token.level)
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _admit(self, scope: Scope, headers: Mapping[bytes, bytes]) -> TokenInfo | None:
        """The live token a request presents, within its rate (``_Refused`` otherwise); ``None``
        for a public route asked without a key."""
        secret, problem = _key_of(scope, headers)
        if problem is not None:
            raise _Refused(400, problem, "invalid_api_key")
        if secret is None and scope["path"] in PUBLIC_PATHS:
            return None
        if secret is None:
            cookie = b"hn_session=" in headers.get(b"cookie", b"")
            raise _Refused(
                401,
                "this route takes an API key: 'Authorization: Bearer <token>' with a token from "
                "'hearthnet ui token create'"
                + (" (the web UI's sign-in cookie is not one)" if cookie else ""),
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="hearthnet"'},
            )
        token = await self._tokens.lookup(secret)
        if token is None:
            _REFUSED.log((scope.get("client") or ("?",))[0], path=_route(scope["path"]))
            raise _Refused(
                401,
                "this API key is not valid: it was revoked or never existed (see 'hearthnet ui token list')",
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="hearthnet", error="invalid_token"'},
            )
        wait = self._bucket.take(token.id)
        if wait > 0:
            raise _Refused(
                429,
                f"too many requests with this API key: try again in {math.ceil(wait)} s",
                "rate_limit_exceeded",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        return token


class _Refused(Exception):
    """A request the door refuses: ``args`` are ``send_error``'s ``(status, message, code)``."""

    def __init__(self, status: int, message: str, code: str, *, headers: Mapping[str, str] | None = None):
        super().__init__(status, message, code)
        self.headers = headers


def _key_of(scope: Scope, headers: Mapping[bytes, bytes]) -> tuple[str | None, str | None]:
    """The key a request presents (the path's, which is then cut from the path), or why it is malformed."""
    path: str = scope["path"]
    in_path: str | None = None
    if path.startswith(PATH_TOKEN):
        in_path, slash, rest = path[len(PATH_TOKEN) :].partition("/")
        if not slash or not in_path:
            return None, "a path key is written /t/<token>/v1/..."
        scope["path"] = "/" + rest
        scope["raw_path"] = scope["path"].encode("utf-8")
    header = headers.get(b"authorization")
    chroma = headers.get(b"x-chroma-token")
    if header is None and chroma is not None:  # ChromaDB's client's other token header
        if in_path is not None:
            return None, "give the API key once: in a header or in the path, not both"
        value = chroma.decode("latin-1").strip()
        return (value or None), (None if value else "the X-Chroma-Token header is empty")
    if header is None:
        return in_path, None
    if in_path is not None:
        return None, "give the API key once: in the Authorization header or in the path, not both"
    text = header.decode("latin-1")
    scheme, _, value = text.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None, "the Authorization header must be 'Bearer <token>'"
    return value.strip(), None


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, at most ``limit`` bytes (``_TooLarge`` past it; ``None`` if the
    client disconnected)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_too_deep(path: str, send: Send) -> None:
    """``400`` for a body nested deeper than any request of these routes (``json_input``), in the
    route's shape: JSON-RPC's parse error on ``/mcp``, OpenAI's on ``/v1``."""
    message = f"the request body is nested more than {MAX_JSON_DEPTH} levels deep"
    if path != "/mcp":
        await send_error(send, 400, message, "bad_request", path=path)
        return
    body = jsonrpc_error_body("bad_request", message, parse_error=True)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _route(path: str) -> str:
    """A path as logged: the route only (a path key never reaches a log)."""
    return path if not path.startswith(PATH_TOKEN) else "/t/…"
