"""How a link turns concurrent sends into stream writes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from hearthnet.errors import ProtocolError
from hearthnet.transport import Link
from hearthnet.transport.link import BATCH_BYTES, LINGER_BATCH
from hearthnet.transport.memory import MemoryByteStream
from hearthnet.transport.session import TAG_LEN
from hearthnet.wire.codec import pack
from hearthnet.wire.frames import DEFAULT_MAX_FRAME, HEADER_LEN
from tests.memory_links import memory_link_pair


class CountingStream(anyio.abc.ByteStream):
    """Counts the writes that reach the underlying stream."""

    def __init__(self, inner: MemoryByteStream) -> None:
        self.inner = inner
        self.writes = 0

    async def send(self, item: bytes) -> None:
        self.writes += 1
        await self.inner.send(item)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.inner.receive(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def linked() -> AsyncIterator[tuple[Link, Link, CountingStream]]:
    counted: list[CountingStream] = []

    def count(stream: anyio.abc.ByteStream) -> anyio.abc.ByteStream:
        assert isinstance(stream, MemoryByteStream)
        counted.append(CountingStream(stream))
        return counted[0]

    a, b = await memory_link_pair(count)
    async with a, b:
        yield a, b, counted[0]


async def burst(link: Link, n: int, *, linger: bool) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(lambda i=i: link.send({"i": i}, linger=linger))


async def receive_all(link: Link, n: int) -> list[Any]:
    with anyio.fail_after(5):
        return [(await link.receive())["i"] for _ in range(n)]


@pytest.mark.anyio
async def test_lingering_senders_share_one_write_and_keep_their_order() -> None:
    async with linked() as (a, b, counted):
        before = counted.writes
        await burst(a, LINGER_BATCH - 1, linger=True)
        assert counted.writes - before == 1
        assert await receive_all(b, LINGER_BATCH - 1) == list(range(LINGER_BATCH - 1))


@pytest.mark.anyio
async def test_a_long_lingering_burst_is_written_every_batch_so_the_peer_can_start() -> None:
    async with linked() as (a, b, counted):
        before = counted.writes
        await burst(a, 2 * LINGER_BATCH + 1, linger=True)
        # A full batch is written at once; what queues while a write is under way joins the next one.
        assert 2 <= counted.writes - before <= 3
        assert await receive_all(b, 2 * LINGER_BATCH + 1) == list(range(2 * LINGER_BATCH + 1))


@pytest.mark.anyio
async def test_frames_of_cancelled_lingering_senders_are_still_written() -> None:
    async with linked() as (a, b, _counted):
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(lambda i=i: a.send({"i": i}, linger=True))
                await anyio.lowlevel.checkpoint()  # every sender has queued; the first lingers
                scope.cancel()
        assert await receive_all(b, 3) == [0, 1, 2]
        await a.send({"i": 3})
        assert await receive_all(b, 1) == [3]


@pytest.mark.anyio
async def test_without_linger_the_first_sender_writes_at_once() -> None:
    async with linked() as (a, b, counted):
        before = counted.writes
        await burst(a, 32, linger=False)
        assert counted.writes - before > 1  # the first frame did not wait for the others
        assert await receive_all(b, 32) == list(range(32))


@pytest.mark.anyio
async def test_a_burst_is_sealed_as_one_frame_and_read_in_order() -> None:
    """Messages queued together share one encryption; the peer opens one frame for all of them."""
    async with linked() as (a, b, _counted):
        sealed, opened = a._session.sent, b._session.received
        await burst(a, LINGER_BATCH - 1, linger=True)
        assert a._session.sent - sealed == 1
        assert await receive_all(b, LINGER_BATCH - 1) == list(range(LINGER_BATCH - 1))
        assert b._session.received - opened == 1


@pytest.mark.anyio
async def test_messages_are_sealed_together_only_up_to_the_batch_size() -> None:
    async with linked() as (a, b, _counted):

        async def padded(n: int, size: int) -> int:
            sealed = a._session.sent
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(lambda i=i: a.send({"i": i, "pad": b"x" * size}, linger=True))
            got = await receive_all(b, n)
            assert got == list(range(n))
            return a._session.sent - sealed

        assert await padded(3, BATCH_BYTES // 4) == 1  # three quarters of a batch: one frame
        assert await padded(4, BATCH_BYTES // 2) == 4  # two halves exceed a batch: one frame each
        assert await padded(2, 2 * BATCH_BYTES) == 2  # larger than a batch: alone in its frame


@pytest.mark.anyio
async def test_a_message_at_the_size_limit_goes_through_and_one_byte_more_is_refused() -> None:
    async with linked() as (a, b, _counted):
        largest = DEFAULT_MAX_FRAME - TAG_LEN - HEADER_LEN  # what fits one sealed frame alone
        overhead = len(pack({"b": b"x" * (1 << 17)})) - (1 << 17)
        await a.send({"b": b"x" * (largest - overhead)})
        assert len((await b.receive())["b"]) == largest - overhead
        with pytest.raises(ProtocolError, match="exceeds"):
            await a.send({"b": b"x" * (largest - overhead + 1)})
        assert not a.closed
        await a.send({"i": 1})
        assert await receive_all(b, 1) == [1]
