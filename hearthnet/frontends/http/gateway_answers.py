"""How the gateway answers: bus errors as OpenAI errors, and a call run within its request.

:class:`GatewayCall` answers JSON, or server-sent ``chat.completion.chunk``s ended by
``[DONE]`` (:class:`Chunks` writes them).  Its headers wait for the first chunk, so an error
before it is an ordinary error answer; after it, one ``error`` event ends the stream.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearthnet.errors import BusError, InternalError, NotFound, Partition, bus_error_in
from hearthnet.frontends.http import openai_shapes as shapes
from hearthnet.frontends.http.bearer import Caller, openai_error_body
from hearthnet.frontends.http.policy import ERROR_STATUS
from hearthnet.frontends.http.responses import EVENT_STREAM_HEADERS, while_connected

__all__ = [
    "STATUS",
    "Chunks",
    "Emit",
    "GatewayCall",
    "ModelNotFound",
    "Producer",
    "error_response",
    "json_response",
]

log = structlog.get_logger("hearthnet.ui")

STATUS: Final[Mapping[str, int]] = {**ERROR_STATUS, "capacity_exceeded": 429}
"""The HTTP status each bus error is answered with by the gateway: the UI's, but a node at capacity
is 429, which OpenAI's clients retry after its ``Retry-After``."""

Emit = Callable[[dict[str, Any]], Awaitable[None]]
Producer = Callable[[Emit], Awaitable[dict[str, Any] | None]]


_CLIENT_FIELDS: Final[Mapping[str, str]] = {
    "texts": "input",
    "messages": "messages",
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "stop": "stop",
    "model": "model",
}
"""A capability's input field (as its contract names it, ``input.max_tokens``) -> the request's
field as an OpenAI client sent it."""
_INPUT_FIELD = re.compile(r"\binput\.([a-z_]+)")


def client_terms(exc: BusError) -> tuple[str, str | None]:
    """The error's message in the client's own field names, and the field at fault (``param``):
    a :class:`~.openai_shapes.FieldError`'s, or the capability input field its message names."""
    param: str | None = getattr(exc, "param", None)
    message = exc.message
    if exc.code not in ("bad_request", "schema_mismatch"):
        return message, None

    def rename(found: re.Match[str]) -> str:
        nonlocal param
        field = _CLIENT_FIELDS.get(found.group(1))
        if field is None:
            return found.group(0)
        param = param or field
        return field

    return _INPUT_FIELD.sub(rename, message), param


def error_response(exc: BusError) -> Response:
    status = STATUS.get(exc.code, 500)
    headers = {}
    if exc.retry_after_ms is not None:
        headers["Retry-After"] = str(max(1, math.ceil(exc.retry_after_ms / 1000)))
    message, param = client_terms(exc)
    message = message if status < 500 or exc.code != "internal_error" else message[:300]
    return Response(
        openai_error_body(status, message, _code(exc), param),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _code(exc: BusError) -> str:
    if isinstance(exc, ModelNotFound):
        return "model_not_found"
    return exc.code


class ModelNotFound(NotFound):
    """An unknown model: ``404`` with code ``model_not_found``."""


def json_response(document: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(document, ensure_ascii=False, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
    )


class Chunks:
    """Writes a streamed completion's chunks: the role with the first text, then the texts, the
    finish, and the usage chunk when it was asked for."""

    def __init__(self, emit: Emit, cid: str, created: int, model: str, include_usage: bool) -> None:
        self._emit = emit
        self._head = (cid, created, model)
        self._usage = include_usage
        self.sent_text = False

    async def text(self, delta: str) -> None:
        body: dict[str, Any] = {"content": delta}
        if not self.sent_text:
            body = {"role": "assistant", "content": delta}
            self.sent_text = True
        await self._emit(shapes.chunk(*self._head, body, with_usage=self._usage))

    async def finish(
        self, reason: str, usage: dict[str, int] | None, extension: dict[str, Any] | None = None
    ) -> None:
        if not self.sent_text:
            await self.text("")
        await self._emit(shapes.chunk(*self._head, {}, reason, with_usage=self._usage, extension=extension))
        if self._usage:
            zero = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
            await self._emit(shapes.chunk(*self._head, None, usage=usage or zero, with_usage=True))


class GatewayCall(Response):
    """Runs a producer within the request: a JSON answer, or (``stream``) server-sent chunks ended
    by ``[DONE]``.  Headers wait for the first chunk, so an error before it is an ordinary error
    answer.  The producer is cancelled when the client goes away or the node stops; with it goes
    its bus call, and the model server's stream behind it."""

    def __init__(self, producer: Producer, closing: anyio.Event, stream: bool) -> None:
        # No Response.__init__: it would add a content-length of 0.
        self.status_code = 200
        self.background = None
        self._producer = producer
        self._closing = closing
        self._stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        finished = False
        outcome: dict[str, Any] | None = None
        failure: BusError | None = None

        async def emit(doc: dict[str, Any]) -> None:
            nonlocal started
            if not started:
                started = True
                start = {"type": "http.response.start", "status": 200, "headers": list(EVENT_STREAM_HEADERS)}
                await send(start)
            data = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
            await send(
                {"type": "http.response.body", "body": f"data: {data}\n\n".encode(), "more_body": True}
            )

        async def produce() -> None:
            nonlocal outcome, finished, failure
            try:
                outcome = await self._producer(emit)
                finished = True
            except Exception as exc:
                failure = bus_error_in(exc)
                if failure is None:
                    log.error("gateway_failed", error=type(exc).__name__)
                    failure = InternalError("the gateway failed on this request")

        if await while_connected(produce, receive, self._closing):
            return  # the client went away: nobody to answer
        if not finished and failure is None:  # cut short: the node is stopping
            failure = Partition("the node is stopping: the answer was cut short")
        with anyio.CancelScope(shield=True), anyio.move_on_after(2):
            try:
                if not started:
                    answer = error_response(failure) if failure is not None else json_response(outcome)
                    await answer(scope, receive, send)
                    return
                if failure is not None:
                    error = json.loads(
                        openai_error_body(STATUS.get(failure.code, 500), failure.message, failure.code)
                    )
                    await emit(error)
                elif self._stream:
                    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass


def keyed_endpoint(
    run: Callable[[Request, Caller], Awaitable[Response]],
    *,
    answer: Callable[[Exception], Response],
    no_key: Callable[[], Exception],
    problems: tuple[type[Exception], ...] = (),
) -> Callable[[Request], Awaitable[Response]]:
    """A route of a door for programs (the gateway, ChromaDB's, TEI's): ``run`` with the caller the
    bearer door found (``no_key()`` answered without one); a ``BusError`` or one of the door's own
    ``problems`` answered in the door's shape by ``answer``."""
    caught: tuple[type[Exception], ...] = (BusError, *problems)

    async def endpoint(request: Request) -> Response:
        caller: Caller | None = request.scope.get("hn.caller")
        try:
            if caller is None:  # the bearer door answered 401 otherwise
                raise no_key()
            return await run(request, caller)
        except caught as exc:
            return answer(exc)

    return endpoint
