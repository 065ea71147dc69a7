"""Answers of the UI's routes: JSON with bus errors mapped to HTTP, and streamed answers.

Streamed answers (server-sent events, blob bytes) are ASGI responses that run their producer
in the request's own task, with a watcher that cancels it when the browser goes away: no
cancel scope spans a generator's ``yield``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearthnet.errors import BadRequest, BusError
from hearthnet.frontends.http.live import sse
from hearthnet.frontends.http.policy import http_status
from hearthnet.frontends.json_input import loads_bounded

__all__ = ["EventStream", "error_response", "json_body", "json_response"]

MAX_JSON_BODY = 64 * 1024


def _default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_response(document: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    body = json.dumps(document, default=_default, ensure_ascii=False, separators=(",", ":"))
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def error_response(exc: BusError) -> Response:
    return json_response(exc.to_wire(), status=http_status(exc))


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (at most ``MAX_JSON_BODY`` bytes), or ``bad_request``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_JSON_BODY:
            raise BadRequest(f"the request body is over {MAX_JSON_BODY} bytes")
        chunks.append(chunk)
    value = loads_bounded(b"".join(chunks) or b"{}")
    if not isinstance(value, dict):
        raise BadRequest("the request body must be a JSON object")
    return value


EVENT_STREAM_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-accel-buffering", b"no"),
)
"""The headers of a stream of server-sent events (never cached, never buffered by a proxy)."""


async def while_connected(
    work: Callable[[], Awaitable[None]], receive: Receive, closing: anyio.Event
) -> bool:
    """Run ``work`` until it returns, the client goes away, or ``closing`` is set (the node stops),
    whichever is first; ``True`` if the client went away.  ``work`` handles its own errors."""
    gone = False
    async with anyio.create_task_group() as tg:

        async def until_gone() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass
            gone = True
            tg.cancel_scope.cancel()

        async def until_closing() -> None:
            await closing.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(until_gone)
        tg.start_soon(until_closing)
        await work()
        tg.cancel_scope.cancel()
    return gone


Emit = Callable[[str, Any], Awaitable[None]]


class EventStream(Response):
    """A ``text/event-stream`` answer written by ``producer(emit)``; ends when it returns, the
    browser goes away, or ``closing`` is set (the node stops)."""

    media_type = "text/event-stream"

    def __init__(self, producer: Callable[[Emit], Awaitable[None]], closing: anyio.Event) -> None:
        # No Response.__init__: it would add a content-length of 0.
        self.status_code = 200
        self.background = None
        self.raw_headers = list(EVENT_STREAM_HEADERS)
        self._producer = producer
        self._closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        # An EventSource that loses the node (stopped, restarting) tries again after a second.
        await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})

        async def emit(kind: str, data: Any) -> None:
            await send({"type": "http.response.body", "body": sse(kind, data), "more_body": True})

        async def produce() -> None:
            try:
                await self._producer(emit)
            except BusError as exc:
                await emit("error", exc.to_wire())

        await while_connected(produce, receive, self._closing)
        with anyio.CancelScope(shield=True), anyio.move_on_after(1):
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass
