"""The local control socket: a real ControlServer on a real bus, driven by the real client."""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.client import AsyncClient
from hearthnet.community import Level
from hearthnet.errors import BadRequest, NotFound, Partition
from hearthnet.frontends.control import server as control
from hearthnet.frontends.control.protocol import CONTROL_MAX_FRAME, read_message, write_message
from hearthnet.frontends.control.server import ControlServer
from hearthnet.identity import Identity
from hearthnet.wire.frames import FrameDecoder
from tests.polling import wait_until


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
    real = control.accept_unix
    failures: list[BaseException] = [OSError(errno.EMFILE, "Too many open files")]
    failures.append(anyio.BrokenResourceError())

    async def flaky(listener: Any) -> Any:
        if failures:
            raise failures.pop(0)
        return await real(listener)

    monkeypatch.setattr(control, "accept_unix", flaky)
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
        bound = "timeout must be a finite number of seconds above 0 and at most 86400 (a day)"
        for bad in (float("nan"), float("inf"), -1.0, 0.0, 86_401.0, 1e300):
            with pytest.raises(BadRequest, match=re.escape(bound)):
                await client.call("test.echo", timeout=bad)  # refused by the client, before sending
            # ... and by the node, for a client that sends it anyway
            async with await anyio.connect_unix(tmp_path / "control.sock") as raw:
                request = {"capability": "test.echo", "input": {}, "timeout": bad, "stream": False}
                await write_message(raw, request)
                answer = await read_message(raw, FrameDecoder(max_frame=CONTROL_MAX_FRAME), [])
            assert answer["error"] == "bad_request" and answer["message"].startswith(bound), answer
        assert (await client.call("test.echo", input={"x": 2}, timeout=86_400)).output["echo"] == 2


@pytest.mark.anyio
async def test_a_request_nested_past_the_wire_bound_is_a_bad_request(tmp_path: Path) -> None:
    """msgpack decodes 1,000 levels; whatever then walked the value would recurse that deep."""
    deep: Any = 1
    for _ in range(1000):
        deep = [deep]
    async with serving(tmp_path):
        async with await anyio.connect_unix(tmp_path / "control.sock") as raw:
            await write_message(raw, {"capability": "test.echo", "input": {"x": deep}, "stream": False})
            answer = await read_message(raw, FrameDecoder(max_frame=CONTROL_MAX_FRAME), [])
        assert answer["error"] == "bad_request" and "nested more than 64 levels" in answer["message"]
        assert (await AsyncClient(tmp_path).call("test.echo", input={"x": "fine"})).output["echo"] == "fine"


def counting_accepts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the connections the control server accepts from now on."""
    real = control.accept_unix
    accepted: list[int] = []

    async def accept(listener: Any) -> Any:
        stream = await real(listener)
        accepted.append(1)
        return stream

    monkeypatch.setattr(control, "accept_unix", accept)
    return accepted


@pytest.mark.anyio
async def test_a_kept_client_sends_call_after_call_on_one_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside ``async with``, calls (an error answer included) share one connection; without it,
    every call has its own, closed when it ends (the CLI's way)."""
    accepted = counting_accepts(monkeypatch)
    async with serving(tmp_path) as server:
        async with AsyncClient(tmp_path) as client:
            for i in range(5):
                assert (await client.call("test.echo", input={"x": i})).output["echo"] == i
            with pytest.raises(NotFound):
                await client.call("test.missing")
            async with client.stream("test.echo", input={"x": "s"}) as call:
                assert (await call.result()).output["echo"] == "s"
            assert (await client.call("test.echo", input={"x": "last"})).output["echo"] == "last"
            assert len(accepted) == 1 and server.connections == 1
        await wait_until(lambda: server.connections == 0)  # closed with the client
        plain = AsyncClient(tmp_path)
        for i in range(3):
            assert (await plain.call("test.echo", input={"x": i})).output["echo"] == i
        assert len(accepted) == 4
        await wait_until(lambda: server.connections == 0)


@pytest.mark.anyio
async def test_a_connection_the_node_closed_or_a_call_left_unfinished_is_not_used_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "IDLE_SECONDS", 0.2)
    accepted = counting_accepts(monkeypatch)
    async with serving(tmp_path), AsyncClient(tmp_path) as client:
        await client.call("test.echo", input={"x": 1})
        ((kept, _),) = client._idle
        await wait_until(lambda: not kept.reusable)  # idle past IDLE_SECONDS: the node closed it
        monkeypatch.setattr(control, "IDLE_SECONDS", 30.0)  # from here on, however slow the host
        assert (await client.call("test.echo", input={"x": 2})).output["echo"] == 2
        assert len(accepted) == 2
        async with client.stream("test.echo", input={"x": 3}):
            pass  # left before its answer was read: that connection must not carry the next call
        assert (await client.call("test.echo", input={"x": 4})).output["echo"] == 4
        assert len(accepted) == 3


@pytest.mark.anyio
async def test_a_request_whose_write_fails_is_not_sent_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node closed the kept connection in the instant before the next call was written: the
    call fails with partition instead of being sent again (the node might have read all of it
    before the failure showed, and a call must not run twice); the next call connects anew."""
    from hearthnet.transport.tcp_stream import TcpStream

    monkeypatch.setattr(control, "IDLE_SECONDS", 0.2)
    accepted = counting_accepts(monkeypatch)
    calls = 0

    async def counted(ctx: CallContext) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {}

    async with serving(tmp_path) as server, AsyncClient(tmp_path) as client:
        descriptor = CapabilityDescriptor("test.count", (1, 0), local_only=True)
        server._bus.register(Registration(descriptor, counted))
        await client.call("test.count")
        ((kept, _),) = client._idle
        await wait_until(lambda: not kept.reusable)  # the node closed it
        with monkeypatch.context() as m:
            m.setattr(TcpStream, "reusable", property(lambda self: True))  # not seen by the client
            with pytest.raises(Partition, match="before the call was sent"):
                await client.call("test.count")
        assert calls == 1 and client._idle == []
        await client.call("test.count")
        assert calls == 2 and len(accepted) == 2
