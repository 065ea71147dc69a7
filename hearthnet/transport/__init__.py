"""Authenticated, encrypted, framed links between nodes (see ``specs/transport.md``).

The names below load their module on first use: a client of the control socket
imports only ``tcp_stream`` from this package, not the cryptography and logging
every link needs (the CLI starts faster).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.runtime.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from hearthnet.transport.handshake import PROTOCOL_VERSION
    from hearthnet.transport.link import (
        Admit,
        Link,
        accept_link,
        format_address,
        initiate_link,
        open_link,
        socket_peer_address,
    )
    from hearthnet.transport.memory import MemoryByteStream, memory_stream_pair
    from hearthnet.transport.session import Session
    from hearthnet.transport.tcp import LinkHandler, create_listener, listener_port, serve_links

_HOME = {
    "PROTOCOL_VERSION": "handshake",
    "Admit": "link",
    "Link": "link",
    "accept_link": "link",
    "format_address": "link",
    "initiate_link": "link",
    "open_link": "link",
    "socket_peer_address": "link",
    "MemoryByteStream": "memory",
    "memory_stream_pair": "memory",
    "Session": "session",
    "LinkHandler": "tcp",
    "create_listener": "tcp",
    "listener_port": "tcp",
    "serve_links": "tcp",
}

__all__ = [
    "PROTOCOL_VERSION",
    "Admit",
    "Link",
    "LinkHandler",
    "MemoryByteStream",
    "Session",
    "accept_link",
    "create_listener",
    "format_address",
    "initiate_link",
    "listener_port",
    "memory_stream_pair",
    "open_link",
    "serve_links",
    "socket_peer_address",
]


if not TYPE_CHECKING:  # the type checker sees the imports above, and flags a misspelt name
    __getattr__ = lazy_getattr(__name__, _HOME, globals())
