"""How a link turns concurrent sends into stream writes."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from hearthnet.transport import Link
from hearthnet.transport.link import LINGER_BATCH
from hearthnet.transport.memory import MemoryByteStream
from tests.memory_links import memory_link_pair


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


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


async def linked() -> tuple[Link, Link, CountingStream]:
    counted: list[CountingStream] = []

    def count(stream: anyio.abc.ByteStream) -> anyio.abc.ByteStream:
        assert isinstance(stream, MemoryByteStream)
        counted.append(CountingStream(stream))
        return counted[0]

    a, b = await memory_link_pair(count)
    return a, b, counted[0]


async def burst(link: Link, n: int, *, linger: bool) -> None:
    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(lambda i=i: link.send({"i": i}, linger=linger))


async def receive_all(link: Link, n: int) -> list[Any]:
    with anyio.fail_after(5):
        return [(await link.receive())["i"] for _ in range(n)]


@pytest.mark.anyio
async def test_lingering_senders_share_one_write_and_keep_their_order() -> None:
    a, b, counted = await linked()
    before = counted.writes
    await burst(a, LINGER_BATCH - 1, linger=True)
    assert counted.writes - before == 1
    assert await receive_all(b, LINGER_BATCH - 1) == list(range(LINGER_BATCH - 1))


@pytest.mark.anyio
async def test_a_long_lingering_burst_is_written_every_batch_so_the_peer_can_start() -> None:
    a, b, counted = await linked()
    before = counted.writes
    await burst(a, 2 * LINGER_BATCH + 1, linger=True)
    # A full batch is written at once; what queues while a write is under way joins the next one.
    assert 2 <= counted.writes - before <= 3
    assert await receive_all(b, 2 * LINGER_BATCH + 1) == list(range(2 * LINGER_BATCH + 1))


@pytest.mark.anyio
async def test_frames_of_cancelled_lingering_senders_are_still_written() -> None:
    a, b, _counted = await linked()
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
    a, b, counted = await linked()
    before = counted.writes
    await burst(a, 32, linger=False)
    assert counted.writes - before > 1  # the first frame did not wait for the others
    assert await receive_all(b, 32) == list(range(32))
