"""The last answer of each HTTP door: a failure no handler caught, said in that door's shape.

Without it, an exception that escapes a route reaches uvicorn, which answers a plain-text
``500`` and logs a traceback.  :class:`LastResort` wraps one door's application: a ``BusError``
that escaped (a handler forgot to catch it) is answered with its own code; anything else is
logged once with a trace id (its type and traceback in the log, never in the body) and answered
``internal_error`` with that trace id.  If the answer had already begun, the connection is
closed instead (there is no way to change a status that was sent).  Cancellation is never caught.

The shapes (``Shape``): the web UI's ``{error, message}``, OpenAI's ``{error: {message, type,
param, code}}`` on ``/v1``, JSON-RPC's ``{jsonrpc, id: null, error: {code, message, data}}`` on
``/mcp``.  Each door's Starlette application has one as its innermost middleware (inside
Starlette's own error middleware, which would answer a plain-text ``500``); one more around the
guard answers for what the guard and the bearer door themselves let escape.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import structlog
from starlette.requests import ClientDisconnect

from hearthnet.errors import BusError, InternalError, bus_error_in
from hearthnet.frontends.http.asgi import ASGIApp, HttpMiddleware, Message, Receive, Scope, Send
from hearthnet.frontends.http.bearer import (
    door_error_body,
    is_bearer_path,
    jsonrpc_error_body,
    openai_error_body,
)
from hearthnet.frontends.http.gateway_answers import STATUS as OPENAI_STATUS
from hearthnet.frontends.http.policy import http_status
from hearthnet.runtime.disk_full import disk_full, is_disk_full

__all__ = [
    "LastResort",
    "Shape",
    "any_door",
    "any_shape",
    "openai_shape",
    "programs_door",
    "programs_shape",
    "ui_door",
    "ui_shape",
]

log = structlog.get_logger("hearthnet.ui")

Shape = Callable[[BusError, str], tuple[int, bytes]]
"""An error as one door answers it: ``(status, JSON body)`` for the error and the request's path."""


def ui_shape(exc: BusError, path: str) -> tuple[int, bytes]:
    return http_status(exc), json.dumps(exc.to_wire(), ensure_ascii=False).encode()


def openai_shape(exc: BusError, path: str) -> tuple[int, bytes]:
    status = OPENAI_STATUS.get(exc.code, 500)
    return status, openai_error_body(status, exc.to_wire()["message"], exc.code)


def programs_shape(exc: BusError, path: str) -> tuple[int, bytes]:
    """OpenAI's shape on ``/v1``, JSON-RPC's on ``/mcp``, ChromaDB's and TEI's on theirs."""
    if path == "/mcp" or path.startswith("/mcp/"):
        return OPENAI_STATUS.get(exc.code, 500), jsonrpc_error_body(exc.code, exc.to_wire()["message"])
    if is_bearer_path(path) and not path.startswith("/v1"):
        status = OPENAI_STATUS.get(exc.code, 500)
        return status, door_error_body(path, status, exc.to_wire()["message"], exc.code)
    return openai_shape(exc, path)


def ui_door(path: str) -> str:
    return "web UI"


def programs_door(path: str) -> str:
    if path == "/mcp" or path.startswith("/mcp/"):
        return "MCP server"
    if path.startswith("/api/v2"):
        return "ChromaDB door"
    return "gateway" if path.startswith("/v1") else "TEI door"


def any_shape(exc: BusError, path: str) -> tuple[int, bytes]:
    """The shape of the door ``path`` belongs to (around the guard, which serves every door)."""
    return programs_shape(exc, path) if is_bearer_path(path) else ui_shape(exc, path)


def any_door(path: str) -> str:
    return programs_door(path) if is_bearer_path(path) else ui_door(path)


def _trace_id() -> str:
    return f"{random.getrandbits(64):016x}"


class LastResort(HttpMiddleware):
    """Pure ASGI around one door (see the module's docstring)."""

    def __init__(self, app: ASGIApp, shape: Shape, door: Callable[[str], str]) -> None:
        super().__init__(app)
        self._shape = shape
        self._door = door

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientDisconnect:
            return  # the client went away (or was cut off for a stalled body): nobody to answer
        except Exception as exc:  # the last answer: anything a route let escape
            error = bus_error_in(exc)
            if error is None and is_disk_full(exc):  # a store that did not say it: said here
                error = disk_full(None, "what this request writes")
            if error is None:
                trace_id = _trace_id()
                door = self._door(scope.get("path", ""))
                log.error("http_failed", door=door, error=type(exc).__name__, trace_id=trace_id, exc_info=exc)
                error = InternalError(f"internal error in the {door} (trace_id={trace_id})")
            if started:
                return  # the status went out already: the server ends the connection
            status, body = self._shape(error, scope.get("path", ""))
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
