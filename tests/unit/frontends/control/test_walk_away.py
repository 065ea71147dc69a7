"""A streamed call through the control socket ends when its client goes away, not at its deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.client import AsyncClient
from hearthnet.community import Level
from hearthnet.frontends.control.protocol import read_message, write_message
from hearthnet.frontends.control.server import ControlServer
from hearthnet.identity import Identity
from hearthnet.wire.frames import FrameDecoder
from tests.polling import wait_until


class Slow:
    """A streamed handler that sends one frame, then waits until released or cancelled."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.cancelled = 0
        self.finished = 0

    async def __call__(self, ctx: CallContext) -> dict[str, Any]:
        await ctx.send({"n": 1})
        try:
            await self.release.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        self.finished += 1
        return {"done": True}


@asynccontextmanager
async def serving(home: Path, handler: Slow) -> AsyncIterator[ControlServer]:
    bus = CapabilityBus(
        Identity.generate(), level_of=lambda _n: Level.ANCHOR, community_id=lambda: "hc1:t", name="n"
    )
    descriptor = CapabilityDescriptor("test.slow", (1, 0), streaming=True, timeout_seconds=60)
    bus.register(Registration(descriptor, handler))
    server = ControlServer(home / "control.sock", bus)
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_client_closing_mid_stream_cancels_the_call_at_once(tmp_path: Path) -> None:
    handler = Slow()
    async with serving(tmp_path, handler):
        started = anyio.current_time()
        async with AsyncClient(tmp_path).stream("test.slow", timeout=60) as call:
            async for frame in call.frames():
                assert frame == {"n": 1}
                break  # the client walks away while the handler still works
        await wait_until(lambda: handler.cancelled == 1, timeout=5)
        assert anyio.current_time() - started < 5 and handler.finished == 0


@pytest.mark.anyio
async def test_a_request_sent_during_a_streamed_call_is_served_after_it(tmp_path: Path) -> None:
    handler = Slow()
    async with serving(tmp_path, handler) as server:
        stream = await anyio.connect_unix(server.path)
        async with stream:
            decoder, pending = FrameDecoder(), []  # type: ignore[var-annotated]
            request = {"capability": "test.slow", "version": "1.0", "params": {}, "input": {}, "stream": True}
            await write_message(stream, request)
            assert await read_message(stream, decoder, pending) == {"t": "frame", "data": {"n": 1}}
            await write_message(stream, {**request, "stream": False})  # the next call, sent early
            await wait_until(lambda: handler.cancelled == 0 and server.connections == 1)
            handler.release.set()
            first = await read_message(stream, decoder, pending)
            second = await read_message(stream, decoder, pending)
        assert first["t"] == "done" and first["output"] == {"done": True}
        assert second["t"] == "done" and second["output"] == {"done": True}
        assert handler.cancelled == 0 and handler.finished == 2
