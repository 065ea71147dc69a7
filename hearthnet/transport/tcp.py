"""TCP listening: bind a listener, learn its port, serve handshaken links."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.abc
import structlog

from hearthnet.errors import BusError
from hearthnet.identity.keys import Identity
from hearthnet.transport.link import Admit, Link, accept_link, socket_peer_address
from hearthnet.wire.frames import DEFAULT_MAX_FRAME

__all__ = ["LinkHandler", "create_listener", "listener_port", "serve_links"]

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

    async def on_connect(stream: anyio.abc.SocketStream) -> None:
        remote = socket_peer_address(stream)
        try:
            link = await accept_link(
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
            return
        _log.debug("transport.link_accepted", remote=remote, peer=link.peer_id)
        async with link:
            await handler(link)

    await listener.serve(on_connect)
