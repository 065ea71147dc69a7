"""TCP listening: bind a listener, learn its port, serve handshaken links."""

from __future__ import annotations

import errno
import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.abc
import structlog

from hearthnet.errors import BusError
from hearthnet.identity.keys import Identity
from hearthnet.transport.link import Admit, Link, accept_link, socket_peer_address
from hearthnet.transport.tcp_stream import accept_tcp
from hearthnet.wire.frames import DEFAULT_MAX_FRAME

__all__ = [
    "MAX_PENDING_HANDSHAKES",
    "LinkHandler",
    "accept_forever",
    "create_listener",
    "listener_port",
    "serve_links",
]

LinkHandler = Callable[[Link], Awaitable[None]]

_log = structlog.get_logger(__name__)


async def create_listener(host: str, port: int) -> anyio.abc.Listener[anyio.abc.SocketStream]:
    """Bind a TCP listener; ``port=0`` picks a free port (see :func:`listener_port`)."""
    return await anyio.create_tcp_listener(local_host=host, local_port=port, reuse_port=False)


def listener_port(listener: anyio.abc.Listener[anyio.abc.SocketStream]) -> int:
    """The TCP port a listener from :func:`create_listener` is bound to."""
    return int(listener.extra(anyio.abc.SocketAttribute.local_port))


async def serve_links(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    handler: LinkHandler,
    *,
    identity: Identity,
    community_id: str,
    admit: Admit,
    max_frame: int = DEFAULT_MAX_FRAME,
    handshake_timeout: float = 5.0,
) -> None:
    """Accept connections forever, each in its own task.

    Every connection runs the responder handshake; a peer that fails it
    (garbage, wrong community, refused key, too slow) is logged and dropped
    without affecting any other connection.  ``handler(link)`` runs for each
    established link, which is closed when the handler returns.
    """

    async def handshake(stream: anyio.abc.ByteStream) -> Link | None:
        remote = socket_peer_address(stream)
        try:
            return await accept_link(
                stream,
                identity=identity,
                community_id=community_id,
                admit=admit,
                remote_address=remote,
                max_frame=max_frame,
                handshake_timeout=handshake_timeout,
            )
        except BusError as exc:
            _log.info("transport.handshake_refused", remote=remote, code=exc.code, reason=exc.message)
            return None

    async def serve(link: Link) -> None:
        _log.debug("transport.link_accepted", remote=link.remote_address, peer=link.peer_id)
        async with link:
            await handler(link)

    await accept_forever(listener, handshake, serve)


MAX_PENDING_HANDSHAKES = 64
"""Connections still in their handshake; further ones are closed unread until one finishes."""
_ACCEPT_BACKOFF_MAX = 1.0
_Stream = TypeVar("_Stream", bound=anyio.abc.ByteStream)


async def accept_retrying(accept: Callable[[], Awaitable[_Stream]], event: str) -> _Stream:
    """The next connection from ``accept()``; a failed accept is logged as ``event`` and retried.

    ``EMFILE``, ``ENFILE``, ``ENOBUFS``, ``ENOMEM``, ``ECONNABORTED``, ... end
    no accept loop: each is retried after a pause that starts at 10 ms and
    doubles up to 1 s.  anyio's own listeners report them as
    ``BrokenResourceError`` (from the ``OSError``); a listener closed on purpose
    (``ClosedResourceError``) still ends the loop.
    """
    backoff = 0.0
    while True:
        try:
            return await accept()
        except (OSError, anyio.BrokenResourceError) as exc:
            backoff = min(max(2 * backoff, 0.01), _ACCEPT_BACKOFF_MAX)
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            code = cause.errno if isinstance(cause, OSError) else None
            name = errno.errorcode.get(code, str(code)) if code is not None else type(exc).__name__
            _log.warning(event, error=name, retry_in_s=backoff)
            await anyio.sleep(backoff)


async def accept_forever(
    listener: anyio.abc.Listener[anyio.abc.SocketStream],
    handshake: Callable[[anyio.abc.ByteStream], Awaitable[Link | None]],
    serve: Callable[[Link], Awaitable[None]],
    *,
    max_pending: int = MAX_PENDING_HANDSHAKES,
) -> None:
    """Accept connections until cancelled: ``handshake`` each in its own task, then ``serve`` the link.

    ``listener.serve`` would end (and take the node with it) on the first
    failed ``accept``, e.g. ``EMFILE`` when a flood of connections has used
    every file descriptor.  Here a failed accept is logged and retried after a
    growing pause (up to 1 s), and at most ``max_pending`` connections may be
    in their handshake at once (each bounded by the handshake timeout and a
    small frame cap); more are closed at once.  ``handshake`` returns the
    link, or ``None`` after refusing (it closes the stream itself).
    """
    subs = getattr(listener, "listeners", None)
    if subs is not None:  # a MultiListener (one socket per address family)
        async with anyio.create_task_group() as tg:
            for sub in subs:
                tg.start_soon(
                    functools.partial(accept_forever, sub, handshake, serve, max_pending=max_pending)
                )
        return
    accept: Callable[[], Awaitable[anyio.abc.ByteStream]]
    if isinstance(listener, anyio.abc.SocketListener):
        accept = functools.partial(accept_tcp, listener)  # our cheaper stream (tcp_stream.py)
    else:
        accept = listener.accept  # type: ignore[attr-defined]
    pending = 0

    async def run(stream: anyio.abc.ByteStream) -> None:
        nonlocal pending
        try:
            link = await handshake(stream)
        except Exception as exc:  # one connection must never end the accept loop (and the node)
            _log.warning("transport.handshake_failed", error=type(exc).__name__)
            await anyio.aclose_forcefully(stream)
            return
        finally:
            pending -= 1
        if link is not None:
            await serve(link)

    async with anyio.create_task_group() as tg:
        while True:
            stream = await accept_retrying(accept, "transport.accept_failed")
            if pending >= max_pending:
                _log.info("transport.connection_shed", pending=pending)
                await anyio.aclose_forcefully(stream)
                continue
            pending += 1
            tg.start_soon(run, stream)
