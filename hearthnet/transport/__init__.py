"""Authenticated, encrypted, framed links between nodes (see ``specs/transport.md``)."""

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
