"""In-memory byte streams, so links can be wired together without sockets in tests."""

from __future__ import annotations

import math

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["MemoryByteStream", "memory_stream_pair"]


class MemoryByteStream(anyio.abc.ByteStream):
    """One end of an in-memory, ordered, reliable byte pipe (like a TCP socket)."""

    def __init__(
        self, send: MemoryObjectSendStream[bytes], receive: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._send = send
        self._receive = receive
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._pending:
            self._pending = await self._receive.receive()
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def send(self, item: bytes) -> None:
        if item:
            await self._send.send(bytes(item))

    async def send_eof(self) -> None:
        await self._send.aclose()

    async def aclose(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


def memory_stream_pair(max_buffer: float = math.inf) -> tuple[MemoryByteStream, MemoryByteStream]:
    """Two connected byte streams: what one sends, the other receives."""
    a_send, b_receive = anyio.create_memory_object_stream[bytes](max_buffer)
    b_send, a_receive = anyio.create_memory_object_stream[bytes](max_buffer)
    return MemoryByteStream(a_send, a_receive), MemoryByteStream(b_send, b_receive)
