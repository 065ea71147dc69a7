"""Keepalives over real TCP: an idle link stays up, a silent one is closed on both sides.

The two buses talk through a TCP relay on 127.0.0.1 that can be frozen: it keeps
both connections open but forwards nothing, which is what a peer that lost power
or a cut network cable looks like (no FIN, no RST).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.bus.liveness import Liveness
from hearthnet.bus.session import PeerSession
from hearthnet.community.levels import Level
from hearthnet.errors import Partition
from hearthnet.identity.keys import Identity
from hearthnet.transport import create_listener, listener_port, open_link, serve_links
from tests.polling import wait_until

COMMUNITY = "ed25519:test-community"
LIVENESS = Liveness(keepalive_seconds=0.1, dead_after_seconds=0.5)


@dataclass
class Relay:
    """Forwards bytes both ways until frozen; counts the reads it forwarded per direction."""

    port: int = 0
    frozen: bool = False
    forwarded: dict[str, int] = field(default_factory=lambda: {"a->b": 0, "b->a": 0})

    async def pump(self, src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream, direction: str) -> None:
        try:
            while True:
                data = await src.receive()
                if not self.frozen:  # frozen: swallow, as a black hole would
                    await dst.send(data)
                    self.forwarded[direction] += 1
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            if not self.frozen:  # a black hole does not pass a close on either
                await dst.aclose()


@asynccontextmanager
async def relay_to(port: int) -> AsyncIterator[Relay]:
    relay = Relay()
    listener = await create_listener("127.0.0.1", 0)
    relay.port = listener_port(listener)

    async def on_connect(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", port) as upstream:
            async with anyio.create_task_group() as tg:
                tg.start_soon(relay.pump, client, upstream, "a->b")
                tg.start_soon(relay.pump, upstream, client, "b->a")

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, on_connect)
        try:
            yield relay
        finally:
            tg.cancel_scope.cancel()


Pair = tuple[CapabilityBus, CapabilityBus, Relay, list[PeerSession]]


@asynccontextmanager
async def two_buses_via_relay() -> AsyncIterator[Pair]:
    ida, idb = Identity.generate(), Identity.generate()
    levels = {ida.node_id: Level.TRUSTED, idb.node_id: Level.TRUSTED}
    a, b = (
        CapabilityBus(i, level_of=levels.get, community_id=lambda: COMMUNITY, name=n, liveness=LIVENESS)
        for i, n in ((ida, "a"), (idb, "b"))
    )
    ended: list[PeerSession] = []

    async def record(session: PeerSession) -> None:
        ended.append(session)

    a.on_session_down(record)
    b.on_session_down(record)
    listener = await create_listener("127.0.0.1", 0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_links(
                listener, b.attach, identity=idb, community_id=COMMUNITY, admit=lambda _peer: None
            )
        )
        try:
            # The relay is closed before the task group is cancelled: cancelling first would
            # turn the body's own failure into a cancellation that the group then swallows.
            async with relay_to(listener_port(listener)) as relay:
                link = await open_link(
                    "127.0.0.1", relay.port, identity=ida, community_id=COMMUNITY, admit=lambda _peer: None
                )
                tg.start_soon(a.attach, link)
                tg.start_soon(a.run_announcer)
                tg.start_soon(b.run_announcer)
                with anyio.fail_after(10):
                    await a.wait_peer(idb.node_id)
                    await b.wait_peer(ida.node_id)
                yield a, b, relay, ended
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_idle_link_is_kept_alive_by_keepalives() -> None:
    async def echo(ctx: Any) -> dict[str, Any]:
        return {"x": ctx.input.get("x")}

    async with two_buses_via_relay() as (a, b, relay, ended):
        b.register(Registration(CapabilityDescriptor("test.echo", (1, 0)), echo))
        await wait_until(lambda: a.providers("test.echo"), timeout=10)
        start = dict(relay.forwarded)
        # Twenty keepalives each way span four times dead_after: without them both sides would drop the link.
        await wait_until(lambda: all(relay.forwarded[d] - start[d] >= 20 for d in start), timeout=30)
        assert ended == []
        assert b.node_id in a.sessions and a.node_id in b.sessions
        res = await a.call("test.echo", input={"x": 7}, provider=b.node_id, timeout=5)
        assert res.output == {"x": 7}


@pytest.mark.anyio
async def test_silent_link_is_closed_on_both_sides_and_fails_pending_calls() -> None:
    started = anyio.Event()

    async def hangs(ctx: Any) -> dict[str, Any]:
        started.set()
        await anyio.sleep_forever()
        return {}

    async with two_buses_via_relay() as (a, b, relay, ended):
        b.register(Registration(CapabilityDescriptor("test.hangs", (1, 0)), hangs))
        await wait_until(lambda: a.providers("test.hangs"), timeout=10)
        outcome: list[BaseException] = []

        async def call() -> None:
            try:
                await a.call("test.hangs", timeout=60, provider=b.node_id)
            except Partition as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await started.wait()
            relay.frozen = True
            frozen_at = anyio.current_time()
            # dead_after is 0.5 s; the call's own deadline (60 s) must not be what ends it.
            await wait_until(lambda: len(ended) >= 2, timeout=10)
        assert anyio.current_time() - frozen_at < 10
        assert len(outcome) == 1 and "lost" in outcome[0].message
        assert {s.peer_id for s in ended} == {a.node_id, b.node_id}
        for session in ended:
            assert session.close_reason.startswith("peer silent for"), session.close_reason
        assert b.node_id not in a.sessions and a.node_id not in b.sessions
        assert not a.providers("test.hangs")


@asynccontextmanager
async def caller_with_two_providers(liveness: Liveness) -> AsyncIterator[tuple[CapabilityBus, ...]]:
    """A linked to B through a relay that can freeze and to C directly, over real TCP; B and C
    both serve ``test.where`` (idempotent), and A prefers B's."""
    ids = [Identity.generate() for _ in range(3)]
    levels = {i.node_id: Level.TRUSTED for i in ids}
    a, b, c = (
        CapabilityBus(i, level_of=levels.get, community_id=lambda: COMMUNITY, name=n, liveness=liveness)
        for i, n in zip(ids, "abc", strict=True)
    )

    def served_by(name: str) -> Any:
        async def where(ctx: Any) -> dict[str, Any]:
            return {"served_by": name}

        return where

    for bus, name in ((b, "b"), (c, "c")):
        descriptor = CapabilityDescriptor("test.where", (1, 0), params={"where": name}, idempotent=True)
        bus.register(Registration(descriptor, served_by(name)))
    a.register_preference("test.where", lambda offered: 1 if offered.get("where") == "b" else 0)
    listeners = [await create_listener("127.0.0.1", 0) for _ in range(2)]
    async with listeners[0], listeners[1], anyio.create_task_group() as tg:
        for listener, bus, ident in ((listeners[0], b, ids[1]), (listeners[1], c, ids[2])):
            tg.start_soon(
                lambda listener=listener, bus=bus, ident=ident: serve_links(
                    listener, bus.attach, identity=ident, community_id=COMMUNITY, admit=lambda _p: None
                )
            )
        try:
            async with relay_to(listener_port(listeners[0])) as relay:
                for port in (relay.port, listener_port(listeners[1])):
                    link = await open_link(
                        "127.0.0.1", port, identity=ids[0], community_id=COMMUNITY, admit=lambda _p: None
                    )
                    tg.start_soon(a.attach, link)
                for bus in (a, b, c):
                    tg.start_soon(bus.run_announcer)
                await wait_until(lambda: len(a.providers("test.where")) == 2, timeout=10)
                yield a, b, c, relay  # type: ignore[misc]
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_calls_leave_a_provider_whose_link_went_silent_at_once() -> None:
    """B's network goes silent (no FIN): a call made then goes to C at once, not after waiting
    for B; once B's link is given up, B's capability is gone; nothing waits out a deadline."""
    async with caller_with_two_providers(Liveness(keepalive_seconds=0.2, dead_after_seconds=3.0)) as (
        a,
        b,
        c,
        relay,
    ):
        first = await a.call("test.where", timeout=30)
        assert first.output == {"served_by": "b"}  # preferred while heard from
        relay.frozen = True
        await wait_until(lambda: time.monotonic() - a.sessions[b.node_id].link.last_received > 0.5, timeout=5)
        started = anyio.current_time()
        moved = await a.call("test.where", timeout=30)
        assert moved.output == {"served_by": "c"} and anyio.current_time() - started < 1.0
        assert b.node_id in a.sessions  # not yet given up: only the choice moved
        await wait_until(lambda: b.node_id not in a.sessions, timeout=10)
        assert [p.node_id for p in a.providers("test.where")] == [c.node_id]
