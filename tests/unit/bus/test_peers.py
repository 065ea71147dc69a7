"""The address book: a member's hearsay must not push out where another member really is."""

from __future__ import annotations

import socket
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.peers import PeerManager
from hearthnet.bus.session import PeerSession
from hearthnet.community.levels import Level
from hearthnet.identity import Identity
from tests.memory_links import COMMUNITY, memory_link_pair


async def _nothing(*_args: Any) -> None:
    return None


@pytest.mark.anyio
async def test_a_members_peer_list_cannot_evict_another_members_real_address() -> None:
    me, other = Identity.generate(), Identity.generate()
    ours, _theirs = await memory_link_pair()  # a real link; its peer is the member who gossips
    gossiper = ours.peer_id
    levels = {me.node_id: Level.TRUSTED, other.node_id: Level.MEMBER, gossiper: Level.MEMBER}
    bus = CapabilityBus(me, level_of=levels.get, community_id=lambda: COMMUNITY, name="me")
    peers = PeerManager(
        bus,
        me,
        community_id=lambda: COMMUNITY,
        admit=lambda _p: None,
        is_member=lambda p: p in levels,
        listen_host="127.0.0.1",
        listen_port=0,
        max_frame=1 << 20,
    )
    session = PeerSession(ours, dispatcher=_nothing, on_control=_nothing)
    peers.add_bootstrap(other.node_id, "192.168.1.20:7000")
    lies = [f"10.255.255.{i}:9" for i in range(20)]
    await peers._on_peers(session, {"t": "peers", "peers": {other.node_id: lies}})
    book = peers.known_addresses()[other.node_id]
    assert book[0] == "192.168.1.20:7000"  # still first: hearsay only fills free places
    assert len(book) <= 8
    # the gossiper speaking for itself is believed first
    await peers._on_peers(session, {"t": "peers", "peers": {gossiper: ["192.168.1.30:7000"]}})
    assert peers.known_addresses()[gossiper][0] == "192.168.1.30:7000"
    await ours.aclose()
    await _theirs.aclose()


def _manager(me: Identity, levels: dict[str, Level]) -> tuple[CapabilityBus, PeerManager]:
    bus = CapabilityBus(me, level_of=levels.get, community_id=lambda: COMMUNITY, name="n")
    peers = PeerManager(
        bus,
        me,
        community_id=lambda: COMMUNITY,
        admit=lambda _p: None,
        is_member=lambda p: p in levels,
        listen_host="127.0.0.1",
        listen_port=0,
        max_frame=1 << 20,
    )
    return bus, peers


@pytest.mark.anyio
async def test_a_signed_record_naming_other_hosts_closes_only_the_link_we_dialled() -> None:
    a, b = Identity.generate(), Identity.generate()
    levels = {a.node_id: Level.MEMBER, b.node_id: Level.MEMBER}
    bus_a, peers_a = _manager(a, levels)
    bus_b, peers_b = _manager(b, levels)
    async with anyio.create_task_group() as tg:
        await tg.start(peers_a.run)
        port_b = await tg.start(peers_b.run)
        assert peers_b.addresses() == [f"127.0.0.1:{port_b}"]  # what it listens on, never a wildcard
        peers_a.add_address(b.node_id, f"127.0.0.1:{port_b}")
        with anyio.fail_after(30):
            await bus_a.wait_peer(b.node_id)
            await bus_b.wait_peer(a.node_id)
        inbound = bus_b.sessions[a.node_id]
        # b says (signed) where a is now: b's link is inbound, its source port says nothing: kept
        peers_b.learn_addresses(a.node_id, ["10.77.0.9:7700"], signed=True)
        dialled = bus_a.sessions[b.node_id]
        # a's link was dialled to 127.0.0.1: kept while b's record still names that host
        peers_a.learn_addresses(b.node_id, ["10.77.0.8:7700", f"127.0.0.1:{port_b}"], signed=True)
        for _ in range(20):  # give a close that was wrongly scheduled every chance to run
            await anyio.lowlevel.checkpoint()
        assert not inbound.link.closed and not dialled.link.closed
        # ... and closed once the record no longer names it (a redial follows)
        down = anyio.Event()

        async def went_down(session: PeerSession) -> None:
            if session is dialled:
                down.set()

        bus_a.on_session_down(went_down)
        peers_a.learn_addresses(b.node_id, ["10.77.0.8:7700"], signed=True)
        with anyio.fail_after(30):
            await down.wait()
        assert dialled.link.closed
        assert peers_a.known_addresses()[b.node_id][0] == "10.77.0.8:7700"  # first in line
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_failing_to_start_after_binding_closes_the_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the interfaces fails after the port is bound: ``run`` closes its listener (it was
    left to the collector: a ResourceWarning, an error in this suite)."""
    me = Identity.generate()
    _bus, peers = _manager(me, {me.node_id: Level.ANCHOR})

    def failing_addresses() -> tuple[list[str], list[str]]:
        raise OSError("no interfaces to read")

    monkeypatch.setattr(peers, "current_addresses", failing_addresses)
    with pytest.raises(OSError, match="no interfaces"):
        await peers.run()
    assert peers.bound_port is not None
    with socket.socket() as again:  # the port is free: nothing listens on it any more
        again.bind(("127.0.0.1", peers.bound_port))
        again.listen()
