"""The address book: a member's hearsay must not push out where another member really is."""

from __future__ import annotations

from typing import Any

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
