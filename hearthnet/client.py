"""Python access to a running node, the same the CLI has (sync and async).

    from hearthnet.client import Client
    with Client("~/.hearthnet") as c:             # or AsyncClient in async code
        out = c.call("rag.query", params={"corpus": "docs"}, input={"query": "..."})
        print(out.output["chunks"])

Calls go through the node's local control socket; vectors that travel as
packed float32 bytes are handed back as plain lists of floats.  Used as
``async with AsyncClient(home) as client:``, one connection serves call after
call (a long-lived caller, e.g. a UI, saves a connect and an accept per call);
otherwise each call has a connection of its own.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import parse_capability_ref
from hearthnet.control_protocol import CONTROL_MAX_FRAME, read_message, valid_timeout, write_message
from hearthnet.errors import BusError, Partition, ProtocolError, Timeout, error_from_wire
from hearthnet.transport.tcp_stream import TcpStream, connect_unix
from hearthnet.wire.frames import FrameDecoder


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``--home`` if given, else ``$HEARTHNET_HOME``, else ``~/.hearthnet``."""
    if home is not None:
        return Path(home).expanduser()
    env = os.environ.get("HEARTHNET_HOME")
    return Path(env).expanduser() if env else Path.home() / ".hearthnet"


def plain_output(output: dict[str, Any]) -> dict[str, Any]:
    """Replace packed float32 vectors by lists of floats (for callers and JSON)."""
    emb = output.get("embeddings")
    if isinstance(emb, bytes | bytearray) and isinstance(output.get("dim"), int) and output["dim"] > 0:
        import numpy as np

        matrix = np.frombuffer(bytes(emb), dtype="<f4").reshape(-1, output["dim"])
        return {**output, "embeddings": matrix.astype(float).tolist()}
    return output


ANSWER_GRACE_SECONDS = 30.0
"""How long past a call's own ``timeout`` the client waits for the node's answer.

The node ends every call by its deadline; a node that says nothing that long
after (wedged, or every control connection taken) is reported as ``timeout``
rather than waited on for ever.  Without a ``timeout`` the node applies the
capability's own, which the client does not know, so it waits.
"""
KEEP_IDLE_SECONDS = 10.0
"""How long an ``async with`` client keeps an idle connection for its next call: well inside
the node's ``IDLE_SECONDS`` (15 s), so the node never closes one just as a call starts."""
MAX_KEPT = 8
"""Idle connections an ``async with`` client keeps at most (one per call it runs at once)."""


class StreamedCall:
    """A streamed call in progress: iterate ``frames()``, then ``result()``."""

    def __init__(self, stream: anyio.abc.ByteStream, deadline: float = math.inf) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(max_frame=CONTROL_MAX_FRAME)
        self._pending: list[bytes] = []
        self._final: dict[str, Any] | None = None
        self._deadline = deadline  # on the clock of the loop the call runs on

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while self._final is None:
            msg = await self._next()
            if msg.get("t") == "frame":
                data = msg.get("data")
                if isinstance(data, dict):
                    yield data
            else:
                self._final = msg

    async def result(self) -> CallResult:
        async for _ in self.frames():
            pass
        assert self._final is not None
        return _finish(self._final)

    @property
    def ended_cleanly(self) -> bool:
        """The final answer was read and nothing more arrived: the connection may carry another call."""
        return self._final is not None and not self._pending and not self._decoder.buffered

    async def _next(self) -> dict[str, Any]:
        # Per read, not around the whole call: the blocking Client reads each frame in a task of its own.
        with anyio.CancelScope(deadline=self._deadline):
            try:
                return await read_message(self.stream, self._decoder, self._pending)
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                raise Partition("the node closed the control connection mid-call") from exc
        raise Timeout(
            f"the node has not answered {ANSWER_GRACE_SECONDS:g} s after the call's timeout: "
            "it may be overloaded or stuck (see its log)"
        )


def _finish(msg: dict[str, Any]) -> CallResult:
    if msg.get("t") == "done":
        output, meta = msg.get("output"), msg.get("meta")
        if not isinstance(output, dict) or not isinstance(meta, dict):
            raise ProtocolError("malformed answer from node")
        return CallResult(plain_output(output), meta, str(msg.get("provider", "")))
    if msg.get("t") == "error":
        raise error_from_wire(msg)
    raise ProtocolError("unexpected message from node")


class AsyncClient:
    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self.home = resolve_home(home)
        self.socket_path = self.home / "control.sock"
        self._keep = False  # inside ``async with``: connections are kept for the next call
        self._idle: list[tuple[TcpStream, float]] = []  # (connection, when its last call ended)

    async def __aenter__(self) -> AsyncClient:
        self._keep = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the kept connections; later calls each use a connection of their own."""
        self._keep = False
        idle, self._idle = self._idle, []
        for stream, _ in idle:
            await stream.aclose()

    async def _kept(self) -> TcpStream | None:
        """A kept connection still fit for a call, if any (the unfit ones are closed)."""
        now = anyio.current_time()
        while self._idle:
            stream, since = self._idle.pop()
            if stream.reusable and now - since < KEEP_IDLE_SECONDS:
                return stream
            await stream.aclose()
        return None

    async def _release(self, call: StreamedCall) -> None:
        stream = call.stream
        if (
            self._keep
            and call.ended_cleanly
            and isinstance(stream, TcpStream)
            and stream.reusable
            and len(self._idle) < MAX_KEPT
        ):
            self._idle.append((stream, anyio.current_time()))
        else:
            await stream.aclose()

    async def _send_request(self, request: dict[str, Any], deadline: float) -> anyio.abc.ByteStream:
        """The connection ``request`` was written to: a kept one if fit, else a new one."""
        kept = await self._kept()
        stream = kept if kept is not None else await self._connect_by(deadline)
        # A write that fails is never sent again: the node may have read the whole request before
        # the failure was seen, and a call must not run twice.  A kept connection the node closed
        # is seen (``reusable``) long before the next call, unless it closed in the same instant.
        try:
            await write_message(stream, request)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            await _close(stream)
            raise Partition("the node closed the control connection before the call was sent") from exc
        except BaseException:
            await _close(stream)
            raise
        return stream

    async def _connect_by(self, deadline: float) -> anyio.abc.ByteStream:
        with anyio.CancelScope(deadline=deadline):
            return await self._connect()  # blocks while the node's accept queue is full
        raise Timeout(f"the node of {self.home} did not take the connection (overloaded or stuck)")

    async def _connect(self) -> anyio.abc.ByteStream:
        try:
            return await connect_unix(self.socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise Partition(
                f"no node is running for home {self.home}: "
                f"start it with 'hearthnet --home {self.home} node run'"
            ) from exc
        except PermissionError as exc:
            raise Partition(f"not allowed to open {self.socket_path}: it belongs to another user") from exc

    @staticmethod
    def _request(
        capability: str,
        params: Mapping[str, Any] | None,
        input: Mapping[str, Any] | None,
        timeout: float | None,
        provider: str | None,
        stream: bool,
    ) -> dict[str, Any]:
        name, version = parse_capability_ref(capability)
        req: dict[str, Any] = {
            "capability": name,
            "version": f"{version[0]}.{version[1]}",
            "params": dict(params or {}),
            "input": dict(input or {}),
            "stream": stream,
        }
        if timeout is not None:
            req["timeout"] = float(timeout)
        if provider is not None:
            req["provider"] = provider
        return req

    async def call(
        self,
        capability: str,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult:
        """Call ``capability`` (``name`` or ``name@X.Y``) through the node; raises ``BusError``."""
        async with self.stream(
            capability, params, input, timeout=timeout, provider=provider, _frames=False
        ) as s:
            return await s.result()

    @asynccontextmanager
    async def stream(
        self,
        capability: str,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        provider: str | None = None,
        _frames: bool = True,
    ) -> AsyncIterator[StreamedCall]:
        request = self._request(capability, params, input, timeout, provider, _frames)
        # A timeout the node will refuse (NaN, infinite, not above 0) sets no deadline here:
        # the node's bad_request says what is wrong with it.
        deadline = math.inf
        if timeout is not None and valid_timeout(timeout):
            deadline = anyio.current_time() + timeout + ANSWER_GRACE_SECONDS
        stream = await self._send_request(request, deadline)
        call = StreamedCall(stream, deadline)
        try:
            yield call
        except BaseException as exc:
            if isinstance(exc, BusError) and call.ended_cleanly:  # the node's answer was an error
                await self._release(call)
            else:
                await _close(stream)
            raise
        await self._release(call)


async def _close(stream: anyio.abc.ByteStream) -> None:
    with anyio.CancelScope(shield=True):
        await stream.aclose()


class Client:
    """Blocking wrapper around :class:`AsyncClient` for scripts."""

    def __init__(self, home: str | os.PathLike[str] | None = None) -> None:
        self._async = AsyncClient(home)
        self.home = self._async.home

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def call(
        self,
        capability: str,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> CallResult:
        async def run() -> CallResult:
            return await self._async.call(capability, params, input, timeout=timeout, provider=provider)

        return anyio.run(run)

    def stream(
        self,
        capability: str,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> Iterator[dict[str, Any] | CallResult]:
        """Yields each stream frame as it arrives, then the final ``CallResult`` (or raises ``BusError``)."""
        with anyio.from_thread.start_blocking_portal() as portal:
            cm = self._async.stream(capability, params, input, timeout=timeout, provider=provider)
            with portal.wrap_async_context_manager(cm) as call:
                frames = call.frames()
                while True:
                    try:
                        frame = portal.call(frames.__anext__)
                    except StopAsyncIteration:
                        break
                    yield frame
                yield portal.call(call.result)


__all__ = ["AsyncClient", "BusError", "CallResult", "Client", "resolve_home"]
