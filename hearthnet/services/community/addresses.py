"""Keeps where this node can be dialled current, and tells the community: a signed
``node.addresses`` record in the log, and an mDNS announcement on the LAN.

Every ``poll_seconds`` (3 s: a few syscalls) it reads the interfaces; when the advertised list
changed (a DHCP renew, another Wi-Fi) the peer manager closes links bound to a vanished address,
a fresh manifest goes out, a new record is signed and gossiped, and the LAN announcement is
redone.  Other members' newest records (and their LAN announcements) go into the peer manager's
address book, which dials at once; the log keeps the last known list of every member on disk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import anyio
import structlog

from hearthnet.community.membership import Membership
from hearthnet.contracts.node_events import NODE_ADDRESSES, newest_addresses
from hearthnet.errors import BusError
from hearthnet.events.envelope import Event
from hearthnet.events.log import EventLog
from hearthnet.services.community.service import CommunityService
from hearthnet.transport.discovery import LanDiscovery

__all__ = ["POLL_SECONDS", "AddressKeeper", "AddressedPeers"]

POLL_SECONDS = 3.0
log = structlog.get_logger("hearthnet.addresses")


class AddressedPeers(Protocol):
    """What the keeper needs of the peer manager (``hearthnet.bus.peers.PeerManager``)."""

    def addresses(self) -> list[str]: ...

    def current_addresses(self) -> tuple[list[str], list[str]]: ...

    async def set_addresses(self, addresses: list[str]) -> bool: ...

    def learn_addresses(self, node_id: str, addresses: Sequence[str], *, signed: bool) -> None: ...


class AddressKeeper:
    def __init__(
        self,
        *,
        node_id: str,
        community: CommunityService,
        event_log: EventLog[Membership],
        peers: AddressedPeers,
        discovery: bool = True,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._node_id = node_id
        self._community = community
        self._log = event_log
        self._peers = peers
        self._poll_seconds = poll_seconds
        self._newest: dict[str, tuple[int, str]] = {}
        self._own_record: list[str] | None = None
        self._announced: tuple[str, list[str]] | None = None
        """The community and LAN addresses last announced (announced again when either changes)."""
        self.discovery = LanDiscovery(node_id, self._found) if discovery else None
        self._wake = anyio.Event()
        """Set when events arrive before this node has recorded its addresses (it may have just
        become a member: a joiner's first sync), so the record goes out without waiting a poll."""
        self.discovered: dict[str, list[str]] = {}
        """What the LAN said of each member (node id -> addresses), for ``status``/``doctor``."""

    def state(self) -> dict[str, Any]:
        """For ``status``: whether discovery is on and working, and what it found."""
        d = self.discovery
        return {
            "enabled": d is not None,
            "working": bool(d and d.working),
            "error": d.error if d is not None else None,
            "found": {n: list(a) for n, a in self.discovered.items()},
        }

    async def run(self) -> None:
        await self._seed()
        self._community.on_events(self._on_events)
        try:
            while True:
                try:
                    await self.check()
                except OSError as exc:  # the interfaces could not be read this time: next poll
                    log.warning("interfaces_unreadable", error=type(exc).__name__)
                with anyio.move_on_after(self._poll_seconds):
                    await self._wake.wait()
                self._wake = anyio.Event()
        finally:
            if self.discovery is not None:
                await self.discovery.close()

    async def check(self) -> bool:
        """Read the interfaces once; re-announce if this node's addresses changed.  True if they did."""
        current, lan = await anyio.to_thread.run_sync(self._peers.current_addresses)
        changed = await self._peers.set_addresses(current)
        if changed:
            log.info("own_addresses_changed", addresses=current)
        community_id = self._log.community_id
        if community_id is None or not current:
            return changed
        await self._publish(current)
        if self.discovery is not None and self._announced != (community_id, lan):
            self._announced = (community_id, lan)
            await self.discovery.announce(community_id, lan)
        return changed

    # the signed record -------------------------------------------------------------------
    async def _seed(self) -> None:
        """The newest record of every member, from the log (what was known before a restart)."""
        events = await anyio.to_thread.run_sync(self._log.events_of_type, NODE_ADDRESSES)
        self._on_events(events)

    async def _publish(self, current: list[str]) -> None:
        if self._own_record == current:
            return
        member = self._log.view(lambda m: m.level_of(self._node_id)) is not None
        if not member:
            return  # a joiner not yet synced: it records its addresses once it is a member
        try:
            await self._community.append(NODE_ADDRESSES, {"addresses": list(current)})
        except BusError as exc:
            log.info("addresses_not_recorded", code=exc.code, reason=exc.message)
            return
        self._own_record = list(current)

    def _on_events(self, events: Sequence[Event]) -> None:
        if self._own_record is None:
            self._wake.set()
        for author, (key, addresses) in newest_addresses(events).items():
            held = self._newest.get(author)
            if held is not None and held >= key:
                continue  # an older record arriving late: the newest wins
            self._newest[author] = key
            if author == self._node_id:
                self._own_record = addresses
            else:
                self._peers.learn_addresses(author, addresses, signed=True)

    # the LAN --------------------------------------------------------------------------------
    def _found(self, node_id: str, addresses: list[str]) -> None:
        if self.discovered.get(node_id) == addresses:
            return
        self.discovered[node_id] = list(addresses)
        log.info("member_found_on_lan", peer=node_id, addresses=addresses)
        self._peers.learn_addresses(node_id, addresses, signed=False)
