"""Happy eyeballs over real TCP on loopback: an address that swallows the handshake costs the
stagger, not the handshake timeout, and the losers are closed."""

from __future__ import annotations

import socket
import time

import anyio
import pytest

from hearthnet.errors import Partition
from hearthnet.identity import Identity
from hearthnet.transport import Link
from hearthnet.transport.dial import STAGGER, DialFailed, dial_first
from hearthnet.transport.link import open_link
from hearthnet.transport.tcp import create_listener, listener_port, serve_links

COMMUNITY = "hc1:dial-test"
HANDSHAKE_TIMEOUT = 20.0
"""Long on purpose: dialling the silent address first, one at a time, would take this long."""


def _closed_port() -> int:
    """A loopback port with no listener (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _dial(addresses: list[str], me: Identity, expected: str) -> tuple[str, Link]:
    async def attempt(address: str) -> Link:
        host, _, port = address.rpartition(":")
        return await open_link(
            host,
            int(port),
            identity=me,
            community_id=COMMUNITY,
            admit=lambda _p: None,
            expected_peer=expected,
            handshake_timeout=HANDSHAKE_TIMEOUT,
        )

    async def close(link: Link) -> None:
        await link.aclose()

    return await dial_first(addresses, attempt, close=close)


@pytest.mark.anyio
async def test_a_silent_and_a_refusing_address_cost_the_stagger_not_the_timeout() -> None:
    me, peer = Identity.generate(), Identity.generate()
    silent = socket.socket()  # accepts (the kernel completes TCP) but never says a word
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    good = await create_listener("127.0.0.1", 0)
    addresses = [
        f"127.0.0.1:{silent.getsockname()[1]}",
        f"127.0.0.1:{_closed_port()}",
        f"127.0.0.1:{listener_port(good)}",
    ]

    async def served(link: Link) -> None:
        await anyio.sleep_forever()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: serve_links(
                    good, served, identity=peer, community_id=COMMUNITY, admit=lambda _p: None
                )
            )
            start = time.monotonic()
            alone_address, alone = await _dial(addresses[2:], me, peer.node_id)
            alone_s = time.monotonic() - start
            await alone.aclose()
            start = time.monotonic()
            address, link = await _dial(addresses, me, peer.node_id)
            elapsed = time.monotonic() - start
            assert address == addresses[2] == alone_address and link.peer_id == peer.node_id
            # two staggers (the silent one, then the refused one fails at once and the next
            # starts), plus the good one's own time; far below the silent one's timeout
            assert elapsed < alone_s + 2 * STAGGER + 2.0 and elapsed < HANDSHAKE_TIMEOUT / 2
            await link.aclose()
            # the silent address's attempt was cancelled and its connection closed
            silent.settimeout(10)
            conn, _ = silent.accept()
            with conn:
                conn.settimeout(10)
                assert conn.recv(4096)  # the hello it was sent
                while conn.recv(4096):
                    pass  # then EOF: the loser's stream was closed
            tg.cancel_scope.cancel()
    finally:
        silent.close()
        await good.aclose()


@pytest.mark.anyio
async def test_every_address_failing_says_why_for_each() -> None:
    me, peer = Identity.generate(), Identity.generate()
    addresses = [f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"]
    with pytest.raises(DialFailed) as caught:
        await _dial(addresses, me, peer.node_id)
    assert isinstance(caught.value, Partition)
    assert sorted(caught.value.errors) == sorted(addresses)
    assert all(isinstance(e, Partition) for e in caught.value.errors.values())
    with pytest.raises(DialFailed, match="no address"):
        await _dial([], me, peer.node_id)
