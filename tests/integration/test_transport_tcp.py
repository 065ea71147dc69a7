"""Links over real TCP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from hearthnet.errors import BusError, Partition, ProtocolError, Unauthorized
from hearthnet.identity.keys import Identity
from hearthnet.transport import Link, create_listener, listener_port, open_link, serve_links
from hearthnet.wire.frames import HEADER

COMMUNITY = "ed25519:test-community"


def allow(peer: str) -> None:
    return None


@asynccontextmanager
async def server(
    identity: Identity, admit: Any = allow
) -> AsyncIterator[tuple[int, anyio.abc.ObjectReceiveStream[Link], list[BusError]]]:
    """A listener whose accepted links are handed to the test; refusals are collected."""
    listener = await create_listener("127.0.0.1", 0)
    port = listener_port(listener)
    send, receive = anyio.create_memory_object_stream[Link](16)
    refused: list[BusError] = []

    def admit_and_record(peer: str) -> None:
        try:
            admit(peer)
        except BusError as exc:
            refused.append(exc)
            raise

    async def handler(link: Link) -> None:
        done = anyio.Event()
        link.done = done  # type: ignore[attr-defined]
        await send.send(link)
        await done.wait()  # the test owns the link until it sets done

    async with listener, send, receive, anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_links(
                listener, handler, identity=identity, community_id=COMMUNITY, admit=admit_and_record
            )
        )
        try:
            yield port, receive, refused
        finally:
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_many_concurrent_sends_both_directions_arrive_intact() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    async with server(bob) as (port, accepted, _):
        client = await open_link("127.0.0.1", port, identity=alice, community_id=COMMUNITY, admit=allow)
        srv = await accepted.receive()
        assert client.peer_id == bob.node_id and srv.peer_id == alice.node_id
        assert client.remote_address == f"127.0.0.1:{port}"
        assert srv.remote_address.startswith("127.0.0.1:")
        senders, per_sender = 16, 100
        payload = bytes(range(256)) * 8

        async def blast(link: Link, k: int) -> None:
            for i in range(per_sender):
                await link.send({"k": k, "i": i, "data": payload})

        async def collect(link: Link, out: list[dict[str, Any]]) -> None:
            for _ in range(senders * per_sender):
                out.append(await link.receive())

        got_srv: list[dict[str, Any]] = []
        got_client: list[dict[str, Any]] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect, srv, got_srv)
            tg.start_soon(collect, client, got_client)
            for k in range(senders):
                tg.start_soon(blast, client, k)
                tg.start_soon(blast, srv, k)
        for got in (got_srv, got_client):
            assert all(m["data"] == payload for m in got)
            for k in range(senders):
                assert [m["i"] for m in got if m["k"] == k] == list(range(per_sender))
        await client.aclose()
        with pytest.raises(anyio.EndOfStream):
            await srv.receive()
        srv.done.set()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_oversized_frame_on_established_link_closes_it() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    async with server(bob) as (port, accepted, _):
        client = await open_link("127.0.0.1", port, identity=alice, community_id=COMMUNITY, admit=allow)
        srv = await accepted.receive()
        await client.send({"before": True})
        assert await srv.receive() == {"before": True}
        await client._stream.send(HEADER.pack((1 << 20) + 1))  # declare a frame over the 1 MiB cap
        with pytest.raises(ProtocolError):
            await srv.receive()
        assert srv.closed
        with pytest.raises((anyio.EndOfStream, Partition)):
            await client.receive()
        await client.aclose()
        srv.done.set()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_garbage_before_handshake_is_dropped_without_hurting_honest_peer() -> None:
    alice, bob = Identity.generate(), Identity.generate()
    async with server(bob) as (port, accepted, _):
        garbage = await anyio.connect_tcp("127.0.0.1", port)
        await garbage.send(b"GET / HTTP/1.1\r\nHost: hearth\r\n\r\n")
        client = await open_link("127.0.0.1", port, identity=alice, community_id=COMMUNITY, admit=allow)
        srv = await accepted.receive()
        assert srv.peer_id == alice.node_id
        # the garbage connection is closed by the listener
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
            while True:
                await garbage.receive()
        await garbage.aclose()
        await client.send({"still": "fine"})
        assert await srv.receive() == {"still": "fine"}
        await client.aclose()
        srv.done.set()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_refused_member_gets_unauthorized_and_listener_keeps_serving() -> None:
    alice, bob, eve = Identity.generate(), Identity.generate(), Identity.generate()

    def members_only(peer: str) -> None:
        if peer != alice.node_id:
            raise Unauthorized("not a member of this community")

    async with server(bob, members_only) as (port, accepted, refused):
        with pytest.raises(Unauthorized):
            await open_link("127.0.0.1", port, identity=eve, community_id=COMMUNITY, admit=allow)
        assert [type(e) for e in refused] == [Unauthorized]
        client = await open_link(
            "127.0.0.1", port, identity=alice, community_id=COMMUNITY, admit=allow, expected_peer=bob.node_id
        )
        srv = await accepted.receive()
        await srv.send({"hi": "alice"})
        assert await client.receive() == {"hi": "alice"}
        await client.aclose()
        srv.done.set()  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_connection_refused_is_partition() -> None:
    listener = await create_listener("127.0.0.1", 0)
    port = listener_port(listener)
    await listener.aclose()
    with pytest.raises(Partition):
        await open_link("127.0.0.1", port, identity=Identity.generate(), community_id=COMMUNITY, admit=allow)
