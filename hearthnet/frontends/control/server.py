"""The local control channel: a Unix socket (mode 0600) inside the node's home.

Only the home's owner can open it.  A connection carries calls one after
another, each::

    client -> {capability, version, params, input, timeout?, provider?, stream}
    server -> {t: "frame", data}*  then exactly one {t: "done", output, meta, provider}
                                   or {t: "error", error, message, retry_after_ms?}

A client may close after one call (the CLI does) or send its next request on
the same connection (a long-lived client, e.g. a UI: no connect and accept per
call).  The server closes a connection that sends no request within
``REQUEST_SECONDS`` of connecting or ``IDLE_SECONDS`` of its last answer, and
after a request it cannot decode.

The server performs the call through this node's bus as the node itself, so
local-only capabilities (``node.status``, ``community.invite`` ...) are
reachable here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.descriptors import parse_version
from hearthnet.errors import BadRequest, BusError, InternalError, ProtocolError
from hearthnet.frontends.control.protocol import (
    CONTROL_MAX_FRAME,
    read_message,
    timeout_problem,
    write_message,
)
from hearthnet.transport.tcp import accept_retrying
from hearthnet.transport.tcp_stream import accept_unix
from hearthnet.wire.frames import FrameDecoder

log = structlog.get_logger("hearthnet.frontends.control.server")


MAX_CONNECTIONS = 512
"""Control connections served at once.  Beyond that the server stops accepting until one ends
(further clients wait in the listen backlog): bounded file descriptors, nobody turned away."""
REQUEST_SECONDS = 30.0
"""How long a client has to send its first request after connecting."""
IDLE_SECONDS = 15.0
"""How long a connection may wait for its next request after an answer (a kept connection holds
one of the ``MAX_CONNECTIONS`` slots meanwhile); clients keep theirs for less (10 s)."""
WRITE_SECONDS = 60.0
"""How long one answer or frame may wait for a client that stopped reading."""


class ControlServer:
    name = "control"

    def __init__(self, path: Path, bus: CapabilityBus) -> None:
        self.path = path
        self._bus = bus
        self.connections = 0
        """Control connections being served now."""
        self._slot_freed: anyio.Event | None = None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        if self.path.exists() or self.path.is_symlink():
            self.path.unlink()
        # Created with mode 0600 (and inside the 0700 home): no process-wide umask change,
        # which other threads writing files meanwhile would inherit.
        listener = await anyio.create_unix_listener(self.path, mode=0o600)
        task_status.started()
        try:
            async with listener, anyio.create_task_group() as tg:
                await self._accept_forever(listener, tg)
        finally:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass

    async def _accept_forever(self, listener: anyio.abc.SocketListener, tg: anyio.abc.TaskGroup) -> None:
        """Accept until cancelled.  ``listener.serve`` would end on the first failed accept
        (e.g. ``EMFILE``) and take the node with it: here it is logged and retried."""
        while True:
            if self.connections >= MAX_CONNECTIONS:
                freed = self._slot_freed = anyio.Event()
                await freed.wait()  # the next one waits in the backlog meanwhile
                continue
            stream = await accept_retrying(lambda: accept_unix(listener), "control_accept_failed")
            self.connections += 1
            tg.start_soon(self._handle, stream)

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        try:
            async with stream:
                decoder = FrameDecoder(max_frame=CONTROL_MAX_FRAME)
                pending: list[bytes] = []
                wait = REQUEST_SECONDS
                while True:
                    request: dict[str, Any] | None = None
                    with anyio.move_on_after(wait):
                        try:
                            request = await read_message(stream, decoder, pending)
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            return  # the client is done
                        except ProtocolError as exc:
                            await _answer(stream, {"t": "error", **BadRequest(exc.message).to_wire()})
                            return  # the framing cannot be trusted any more
                    if request is None:
                        return  # connected (or done) and silent: the slot is not held forever
                    if request.get("stream"):
                        await self._serve_watched(stream, request, decoder, pending)
                    else:
                        await self._serve(stream, request)
                    wait = IDLE_SECONDS
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError):
            return  # the client went away or stopped reading
        finally:
            self.connections -= 1
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _serve_watched(
        self,
        stream: anyio.abc.ByteStream,
        request: dict[str, Any],
        decoder: FrameDecoder,
        pending: list[bytes],
    ) -> None:
        """Serve a streamed call while watching the connection: a client that closes it mid-call
        (Ctrl-C, a closed UI) cancels the call at once, so the provider stops its work (an LLM
        its generation) instead of running to the deadline.  Bytes the client sends meanwhile
        (its next request) are kept for the next read."""
        failure: BaseException | None = None
        left = False
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                nonlocal left
                try:
                    while True:
                        pending.extend(decoder.feed(await stream.receive(65536)))
                except (
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    anyio.ClosedResourceError,
                    ProtocolError,
                ):
                    left = True  # gone, or framing that cannot be trusted: the connection ends
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                await self._serve(stream, request)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError) as exc:
                failure = exc  # raised below, outside the task group (not as an ExceptionGroup)
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if left:
            raise anyio.BrokenResourceError("the client closed the control connection mid-call")

    async def _serve(self, stream: anyio.abc.ByteStream, request: dict[str, Any]) -> None:
        try:
            capability = request.get("capability")
            if not isinstance(capability, str):
                raise BadRequest("control request needs a capability")
            version = parse_version(str(request.get("version", "1.0")))
            params = request.get("params") or {}
            inp = request.get("input") or {}
            if not isinstance(params, dict) or not isinstance(inp, dict):
                raise BadRequest("params and input must be JSON objects")
            timeout_f = _timeout(request.get("timeout"))
            provider = request.get("provider")
            provider_s = provider if isinstance(provider, str) else None
            if request.get("stream"):
                async with self._bus.stream(
                    capability, version, params=params, input=inp, timeout=timeout_f, provider=provider_s
                ) as call:
                    await call.end_input()
                    async for frame in call.frames():
                        await _answer(stream, {"t": "frame", "data": frame})
                    result = await call.result()
            else:
                result = await self._bus.call(
                    capability, version, params=params, input=inp, timeout=timeout_f, provider=provider_s
                )
            await _answer(
                stream,
                {"t": "done", "output": result.output, "meta": result.meta, "provider": result.provider},
            )
        except BusError as exc:
            await _answer(stream, {"t": "error", **exc.to_wire()})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, TimeoutError):
            raise
        except Exception:
            log.exception("control_call_failed")
            await _answer(stream, {"t": "error", **InternalError("control call failed").to_wire()})


async def _answer(stream: anyio.abc.ByteStream, message: dict[str, Any]) -> None:
    """Write one message; ``TimeoutError`` if the client does not take it within ``WRITE_SECONDS``."""
    with anyio.fail_after(WRITE_SECONDS):
        await write_message(stream, message)


def _timeout(value: Any) -> float | None:
    """A request's ``timeout``: absent, or a finite number of seconds above 0, at most a day."""
    if value is None:
        return None
    problem = timeout_problem(value)
    if problem is not None:
        raise BadRequest(problem)
    return float(value)
