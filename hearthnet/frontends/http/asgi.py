"""The ASGI shapes the node's own middleware is written in (the guard, the program doors' key check,
the last-resort answer): the callable types, a request's headers, and a base that passes anything
but HTTP (the lifespan, a websocket) straight through."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["ASGIApp", "HttpMiddleware", "Message", "Receive", "Scope", "Send", "request_headers"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def request_headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name; of a repeated header the first one counts."""
    headers: dict[bytes, bytes] = {}
    for key, value in scope["headers"]:
        headers.setdefault(key, value)
    return headers


class HttpMiddleware:
    """Pure ASGI in front of ``app``: HTTP requests go to :meth:`http`, anything else to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer (or pass on) one HTTP request."""
        await self.app(scope, receive, send)
