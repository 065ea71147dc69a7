"""Python access to a running node, the same the CLI has (sync and async).

    from hearthnet.client import Client
    with Client("~/.hearthnet") as c:             # or AsyncClient in async code
        out = c.call("rag.query", params={"corpus": "docs"}, input={"query": "..."})
        print(out.output["chunks"])

Calls go through the node's local control socket; vectors that travel as
packed float32 bytes are handed back as plain lists of floats.  Used as
``async with AsyncClient(home) as client:``, one connection serves call after
call (a long-lived caller, e.g. a UI, saves a connect and an accept per call);
otherwise each call has a connection of its own.  A call refused with
``capacity_exceeded`` and a retry hint is tried again after a jittered,
growing wait, within its deadline (see ``retry_wait``).
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc

from hearthnet.bus.context import CallResult
from hearthnet.bus.descriptors import parse_capability_ref
from hearthnet.contracts.base import Streamed
from hearthnet.contracts.retries import retry_wait
from hearthnet.errors import (
    BadRequest,
    BusError,
    CapacityExceeded,
    NotFound,
    Partition,
    ProtocolError,
    Timeout,
    error_from_wire,
)
from hearthnet.frontends.control.protocol import (
    CONTROL_MAX_FRAME,
    MAX_INPUT_DEPTH,
    encode_message,
    read_message,
    timeout_problem,
)
from hearthnet.transport.tcp_stream import TcpStream, connect_unix
from hearthnet.wire.codec import nested_deeper, value_problem
from hearthnet.wire.frames import FrameDecoder


def resolve_home(home: str | os.PathLike[str] | None = None) -> Path:
    """``--home`` if given, else ``$HEARTHNET_HOME``, else ``~/.hearthnet``.

    A ``~user`` that names nobody (or no home directory to be found) is ``bad_request``.
    """
    given = home if home is not None else os.environ.get("HEARTHNET_HOME") or None
    try:
        return Path(given).expanduser() if given is not None else Path.home() / ".hearthnet"
    except RuntimeError as exc:  # what pathlib raises for an unknown user or no $HOME
        where = f"the home {os.fspath(given)!r}" if given is not None else "the default home ~/.hearthnet"
        raise BadRequest(f"{where} cannot be found: {exc} (give --home DIR)") from None


def no_home(home: Path) -> BusError | None:
    """``not_found`` saying how to create the home when ``home`` holds no node (missing, or no
    identity key in it); ``None`` when it does, or when it is something else (a file) whose own
    error says more."""
    try:
        if (home / "identity.key").exists() or (home.exists() and not home.is_dir()):
            return None
    except OSError:
        return None  # a name too long, a loop: the command's own error names it
    return NotFound(f"no node home at {home}: create one with 'hearthnet init --home {home}'")


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
CAPACITY_RETRY_SECONDS = 30.0
"""How long a call without a ``timeout`` keeps retrying ``capacity_exceeded``.  The node then
applies the capability's own timeout, which the client does not know; half a minute lets a
burst of callers (dozens of CLI processes) drain without waiting on a wedged node for ever."""


class StreamedCall:
    """A streamed call in progress: iterate ``frames()``, then ``result()``."""

    def __init__(
        self, stream: anyio.abc.ByteStream, deadline: float = math.inf, *, retry: _Retry | None = None
    ) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(max_frame=CONTROL_MAX_FRAME)
        self._pending: list[bytes] = []
        self._final: dict[str, Any] | None = None
        self._deadline = deadline  # on the clock of the loop the call runs on
        self._retry = retry
        self._frames_seen = 0

    async def end_input(self) -> None:
        """Nothing to do: a control-socket call sends no input frames (the node ends its input)."""

    async def frames(self) -> AsyncIterator[dict[str, Any]]:
        while self._final is None:
            msg = await self._next()
            if msg.get("t") == "frame":
                self._frames_seen += 1
                data = msg.get("data")
                if isinstance(data, dict):
                    yield data
            elif not await self._sent_again(msg):
                self._final = msg

    async def _sent_again(self, msg: dict[str, Any]) -> bool:
        """Whether the call, refused for capacity before any frame, was sent again (and waited for).

        Only a refusal with a retry hint is retried: ``capacity_exceeded`` without one (a
        full disk, a blob cap) will not pass by waiting.  Once a frame has been handed on,
        the caller has acted on it and the call is not repeated.
        """
        if self._retry is None or self._frames_seen or msg.get("t") != "error":
            return False
        error = error_from_wire(msg)
        if not isinstance(error, CapacityExceeded) or error.retry_after_ms is None:
            return False
        reusable = not self._pending and not self._decoder.buffered
        stream = await self._retry.again(error.retry_after_ms, self.stream, reusable=reusable)
        if stream is None:
            if self._retry.retries:
                msg["message"] = f"{error.message} ({self._retry.summary()})"
            return False
        self.stream = stream
        self._decoder = FrameDecoder(max_frame=CONTROL_MAX_FRAME)
        self._pending = []
        return True

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
    """Calls through the node of ``home``.

    ``retry_capacity`` (on by default): a call refused with ``capacity_exceeded`` and a
    ``retry_after_ms`` hint before it produced anything is sent again after
    :func:`retry_wait`, until its ``timeout`` runs out (``CAPACITY_RETRY_SECONDS`` without
    one); the last refusal is raised if no try got in.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None, *, retry_capacity: bool = True) -> None:
        self.home = resolve_home(home)
        self.socket_path = self.home / "control.sock"
        self.retry_capacity = retry_capacity
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
        await self._release_stream(call.stream, reusable=call.ended_cleanly)

    async def _send_request(self, request: dict[str, Any], deadline: float) -> anyio.abc.ByteStream:
        """The connection ``request`` was written to: a kept one if fit, else a new one."""
        frame = _encoded(request)  # a value that cannot be sent is refused before connecting
        kept = await self._kept()
        stream = kept if kept is not None else await self._connect_by(deadline)
        # A write that fails is never sent again: the node may have read the whole request before
        # the failure was seen, and a call must not run twice.  A kept connection the node closed
        # is seen (``reusable``) long before the next call, unless it closed in the same instant.
        try:
            await stream.send(frame)
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
            missing = no_home(self.home)
            if missing is not None:
                raise missing from None
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
        if timeout is not None:
            problem = timeout_problem(timeout)
            if problem is not None:
                raise BadRequest(problem)
        req: dict[str, Any] = {
            "capability": name,
            "version": f"{version[0]}.{version[1]}",
            "params": dict(params or {}),
            "input": dict(input or {}),
            "stream": stream,
        }
        for part in ("params", "input"):
            if nested_deeper(req[part], MAX_INPUT_DEPTH):
                raise BadRequest(str(value_problem(req[part], where=part, max_depth=MAX_INPUT_DEPTH)))
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
        started = anyio.current_time()
        deadline = math.inf if timeout is None else started + timeout + ANSWER_GRACE_SECONDS
        stream = await self._send_request(request, deadline)
        retry = _Retry(self, request, started, timeout, deadline) if self.retry_capacity else None
        call = StreamedCall(stream, deadline, retry=retry)
        try:
            yield call
        except BaseException as exc:
            if isinstance(exc, BusError) and call.ended_cleanly:  # the node's answer was an error
                await self._release(call)
            else:
                await _close(stream)
            raise
        await self._release(call)

    async def _release_stream(self, stream: anyio.abc.ByteStream, *, reusable: bool) -> None:
        """Keep ``stream`` for the next call if it may carry one, else close it."""
        if (
            self._keep
            and reusable
            and isinstance(stream, TcpStream)
            and stream.reusable
            and len(self._idle) < MAX_KEPT
        ):
            self._idle.append((stream, anyio.current_time()))
        else:
            await _close(stream)


@dataclass(eq=False)
class _Retry:
    """How a call refused for capacity is sent again: after :func:`retry_wait`, with what is
    left of its ``timeout``, while a try can still finish within it."""

    client: AsyncClient
    request: dict[str, Any]
    started: float
    timeout: float | None
    deadline: float
    retries: int = field(default=0, init=False)

    @property
    def until(self) -> float:
        """When no try may start any more: the call's ``timeout``, else the capacity retries' own."""
        return self.started + (self.timeout if self.timeout is not None else CAPACITY_RETRY_SECONDS)

    async def again(
        self, hint_ms: int, old: anyio.abc.ByteStream, *, reusable: bool
    ) -> anyio.abc.ByteStream | None:
        """The connection the call was sent again on, or ``None`` if no try fits in the time left
        (a try needs about the hint's time on top of the wait)."""
        wait = retry_wait(self.retries, hint_ms)
        if anyio.current_time() + wait + hint_ms / 1000 > self.until:
            return None
        self.retries += 1
        await self.client._release_stream(old, reusable=reusable)
        await anyio.sleep(wait)
        request = self.request
        if self.timeout is not None:
            request = {**request, "timeout": max(0.001, self.started + self.timeout - anyio.current_time())}
        return await self.client._send_request(request, self.deadline)

    def summary(self) -> str:
        took = anyio.current_time() - self.started
        return f"still refused after {self.retries + 1} tries over {took:.1f} s"


def _encoded(request: dict[str, Any]) -> bytes:
    """``request`` as a control frame; a value that cannot be sent is ``bad_request`` naming it."""
    try:
        return encode_message(request)
    except ProtocolError:
        problem = value_problem(request, max_depth=1 << 30)
        if problem is None:
            raise  # too large for a frame: its own message says so
        raise BadRequest(problem) from None


async def _close(stream: anyio.abc.ByteStream) -> None:
    with anyio.CancelScope(shield=True):
        await stream.aclose()


T = TypeVar("T")


class Client:
    """Blocking wrapper around :class:`AsyncClient` for scripts and the CLI.

    ``run`` and ``streamed`` run a typed client's call (:mod:`hearthnet.contracts`) to its end:
    ``client.run(lambda c: RagClient(c).query("docs", "..."))``.
    """

    def __init__(self, home: str | os.PathLike[str] | None = None, *, retry_capacity: bool = True) -> None:
        self._async = AsyncClient(home, retry_capacity=retry_capacity)
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

    def run(self, call: Callable[[AsyncClient], Awaitable[T]]) -> T:
        """``call`` (given this node's :class:`AsyncClient`) run to its end, blocking."""

        async def run() -> T:
            return await call(self._async)

        return anyio.run(run)

    def stream(
        self,
        capability: str,
        params: Mapping[str, Any] | None = None,
        input: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        provider: str | None = None,
    ) -> Generator[dict[str, Any] | CallResult, None, None]:
        """Yields each stream frame as it arrives, then the final ``CallResult`` (or raises ``BusError``);
        closing it early cancels the call."""
        return self.streamed(
            lambda c: c.stream(capability, params, input, timeout=timeout, provider=provider)
        )

    def streamed(
        self, open: Callable[[AsyncClient], AbstractAsyncContextManager[Streamed]]
    ) -> Generator[dict[str, Any] | CallResult, None, None]:
        """A typed client's streamed call (``open`` gives it this node's :class:`AsyncClient`):
        each frame as it arrives, then the final ``CallResult``; closing it early cancels the call."""
        with anyio.from_thread.start_blocking_portal() as portal:
            cm = open(self._async)
            with portal.wrap_async_context_manager(cm) as call:
                frames = call.frames()
                while True:
                    try:
                        frame = portal.call(frames.__anext__)
                    except StopAsyncIteration:
                        break
                    yield frame
                yield portal.call(call.result)


__all__ = ["AsyncClient", "BusError", "CallResult", "Client", "no_home", "resolve_home"]
