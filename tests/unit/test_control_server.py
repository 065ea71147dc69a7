"""The local control socket: a real ControlServer on a real bus, driven by the real client."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from hearthnet import control
from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.client import AsyncClient
from hearthnet.community import Level
from hearthnet.control import ControlServer
from hearthnet.errors import BadRequest
from hearthnet.identity import Identity
from tests.polling import wait_until


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serving(home: Path) -> AsyncIterator[ControlServer]:
    identity = Identity.generate()
    bus = CapabilityBus(identity, level_of=lambda _n: Level.ANCHOR, community_id=lambda: "hc1:t", name="n")

    async def echo(ctx: CallContext) -> dict[str, Any]:
        return {"echo": ctx.input.get("x"), "blob": b"\x01" * int(ctx.input.get("size", 0))}

    bus.register(Registration(CapabilityDescriptor("test.echo", (1, 0), local_only=True), echo))
    server = ControlServer(home / "control.sock", bus)
    async with anyio.create_task_group() as tg:
        await tg.start(server.run)
        try:
            yield server
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_client_that_never_asks_does_not_hold_its_connection_forever(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections beyond the cap wait to be accepted (nobody is turned away), and a client that
    connects and never asks gives its slot back after REQUEST_SECONDS."""
    monkeypatch.setattr(control, "REQUEST_SECONDS", 0.3)
    monkeypatch.setattr(control, "MAX_CONNECTIONS", 2)
    async with serving(tmp_path) as server:
        assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
        idle = [await anyio.connect_unix(server.path) for _ in range(2)]
        await wait_until(lambda: server.connections == 2)
        most = 0

        async def watch() -> None:
            nonlocal most
            while True:
                most = max(most, server.connections)
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            with anyio.fail_after(5):  # served once the idle two time out
                result = await AsyncClient(tmp_path).call("test.echo", input={"x": 1})
            tg.cancel_scope.cancel()
        assert result.output["echo"] == 1 and most <= 2
        for s in idle:
            with anyio.fail_after(5), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await s.receive()  # closed by the server
            await s.aclose()
        await wait_until(lambda: server.connections == 0)


@pytest.mark.anyio
async def test_a_failed_accept_is_retried_instead_of_ending_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``listener.serve`` ended on the first failed accept (EMFILE under fd pressure), and with it
    the node's task group: one 'hearthnet status' too many stopped the node."""
    probe = await anyio.create_unix_listener(tmp_path / "probe.sock")
    listener_type = type(probe)
    await probe.aclose()
    real = listener_type.accept
    failures: list[BaseException] = [OSError(errno.EMFILE, "Too many open files")]
    failures.append(anyio.BrokenResourceError())

    async def flaky(self: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return await real(self)

    monkeypatch.setattr(listener_type, "accept", flaky)
    async with serving(tmp_path) as server:
        with anyio.fail_after(10):
            result = await AsyncClient(tmp_path).call("test.echo", input={"x": "still here"})
        assert result.output["echo"] == "still here"
        assert failures == []
        await wait_until(lambda: server.connections == 0)


@pytest.mark.anyio
async def test_control_answers_may_hold_more_than_a_peer_message_and_timeouts_must_be_finite(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path):
        client = AsyncClient(tmp_path)
        big = await client.call("test.echo", input={"size": 3 << 19})  # 1.5 MiB in one field
        assert len(big.output["blob"]) == 3 << 19
        for bad in (float("nan"), float("inf"), -1.0, 0.0):
            with pytest.raises(BadRequest, match="timeout must be a number of seconds above 0"):
                await client.call("test.echo", timeout=bad)
