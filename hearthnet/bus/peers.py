"""Keeps one authenticated link to every reachable member.

Accepts inbound links, dials members it knows an address for, and resolves
the race when two nodes dial each other at once: of two links between the
same pair, the one initiated by the smaller node id wins, so both sides keep
the same link.  Addresses come from the bootstrap peer, from peers' signed
manifests, and from ``peers`` messages (the addresses of their neighbours).
A peer that refuses our handshake as ``revoked`` is reported to ``on_refused``
(the refusal may carry the signed revocation); ``may_dial`` false stops all
dialling (a node that knows it was revoked).
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog

from hearthnet.bus.bus import CapabilityBus
from hearthnet.bus.session import PeerSession
from hearthnet.errors import BusError, ProtocolError, Revoked
from hearthnet.identity import Identity
from hearthnet.transport.addresses import interface_addresses, select_advertised, split_address
from hearthnet.transport.dial import DialFailed, dial_first
from hearthnet.transport.link import Admit, Link, accept_link, open_link, socket_peer_address
from hearthnet.transport.tcp import accept_forever, create_listener, listener_port

log = structlog.get_logger("hearthnet.peers")

MAX_BACKOFF = 3.0
"""Longest wait between two dials of an unreachable member: a device back from sleep is relinked
within about this plus one connect, whichever side dials first."""
_MAX_PEERS = 1024
_MAX_ADDRESSES_PER_PEER = 8
_QUIET_SECONDS = 4.0
"""A link nothing arrived on for this long (longer than the 3 s keepalive of a healthy link) may be
closed on a LAN announcement that no longer names its host."""

Refused = Callable[[str, BusError], Awaitable[None]]
"""``on_refused(peer_id, error)``: the peer we dialled refused the handshake as ``revoked``."""


@dataclass
class _DialState:
    failures: int = 0
    next_try: float = 0.0


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets) -> ``(host, port)``; ``ValueError`` if not one."""
    return split_address(address)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    return True


async def _close_link(link: Link) -> None:
    await link.aclose()


class PeerManager:
    def __init__(
        self,
        bus: CapabilityBus,
        identity: Identity,
        *,
        community_id: Callable[[], str | None],
        admit: Admit,
        is_member: Callable[[str], bool],
        listen_host: str,
        listen_port: int,
        advertise: Sequence[tuple[str, int | None]] = (),
        max_frame: int,
        handshake_timeout: float = 5.0,
        state_path: Path | None = None,
        on_refused: Refused | None = None,
        may_dial: Callable[[], bool] = lambda: True,
    ) -> None:
        self._bus = bus
        self._on_refused = on_refused
        self._may_dial = may_dial
        self._identity = identity
        self._community_id = community_id
        self._admit = admit
        self._is_member = is_member
        self._listen_host = listen_host
        self._listen_port = listen_port
        self._advertise = list(advertise)
        self._own: list[str] = []
        self._max_frame = max_frame
        self._handshake_timeout = handshake_timeout
        self.bound_port: int | None = None
        self._state_path = state_path
        self._address_book: dict[str, list[str]] = {}
        self._book_dirty = anyio.Event()
        self._bootstrap: set[str] = set()
        self._dial: dict[str, _DialState] = {}
        self._dialing: set[str] = set()
        self._wake = anyio.Event()
        self._links: dict[str, Link] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        bus.on_control("peers", self._on_peers)
        bus.on_session_up(self._send_peers)
        bus.on_session_down(self._after_down)

    # addresses ---------------------------------------------------------------
    def addresses(self) -> list[str]:
        """Where peers can dial this node (``specs/transport.md``, "Addresses"); never a wildcard."""
        return list(self._own)

    def current_addresses(self) -> tuple[list[str], list[str]]:
        """What this node should advertise now, and its own addresses on the LAN (what discovery
        announces: the interfaces', whatever is configured), read now (blocking: a few syscalls)."""
        if self.bound_port is None:
            return [], []
        interfaces = interface_addresses()
        lan = select_advertised(self._listen_host, self.bound_port, interfaces)
        if not self._advertise:
            return lan, lan
        return select_advertised(self._listen_host, self.bound_port, interfaces, self._advertise), lan

    async def set_addresses(self, addresses: list[str]) -> bool:
        """Take ``addresses`` as this node's own; True if they changed.  Links whose local
        address is no longer one of this host's (the device was renumbered) are closed, so
        both sides dial again at once instead of waiting for the dead link to go silent."""
        if addresses == self._own:
            return False
        self._own = list(addresses)
        self._book_dirty.set()
        self._bus.announce_soon()  # the manifest carries them
        hosts = {a.ip.split("%")[0] for a in await anyio.to_thread.run_sync(interface_addresses)}
        for peer, link in list(self._links.items()):
            local = link.local_host
            if local is not None and hosts and local not in hosts:
                log.info("link_address_gone", peer=peer, local=local)
                await link.aclose()
        return True

    def learn_addresses(self, node_id: str, addresses: Sequence[str], *, signed: bool) -> None:
        """``node_id`` says it is at ``addresses`` (its signed record, or a LAN announcement).

        They go first in its book, and a dial starts at once if it is not connected.  A link to
        a host it no longer names is closed when the record is signed (an announcement, which
        anyone on the LAN could fake, closes it only if the link has gone quiet).  Only a link
        this node dialled is judged: an inbound link's source address is not an advertised one.
        """
        for address in reversed(list(addresses)[:_MAX_ADDRESSES_PER_PEER]):
            self.add_address(node_id, address)
        link = self._links.get(node_id)
        if link is None or link.closed:
            self.wake()
            return
        hosts = set()
        for address in addresses:
            try:
                hosts.add(parse_address(address)[0])
            except ValueError:
                continue
        if not link.initiator or not all(_is_ip(h) for h in hosts):
            return  # an inbound link's source, or a name we resolved, says nothing about this
        remote = link.remote_address.rpartition(":")[0].strip("[]")
        if remote in hosts or self._tg is None:
            return
        if signed:
            log.info("link_to_old_address", peer=node_id, address=link.remote_address)
            self._tg.start_soon(link.aclose)
        else:
            self._tg.start_soon(self._close_if_quiet, node_id, link)

    async def _close_if_quiet(self, node_id: str, link: Link) -> None:
        """Close ``link`` once nothing has arrived on it for ``_QUIET_SECONDS``; keep it if it speaks."""
        heard = link.last_received
        await anyio.sleep(max(0.0, heard + _QUIET_SECONDS - time.monotonic()))
        if not link.closed and link.last_received == heard:
            log.info("link_to_old_address", peer=node_id, address=link.remote_address)
            await link.aclose()

    def add_bootstrap(self, node_id: str, address: str) -> None:
        """A peer we may dial before our log says it is a member (the inviter)."""
        self._bootstrap.add(node_id)
        self.add_address(node_id, address)

    def add_address(self, node_id: str, address: str, *, vouched: bool = True) -> None:
        """Remember where ``node_id`` may be reached.

        ``vouched`` addresses (an invite token, the node speaking for itself)
        go first and may push the oldest out; hearsay from a third party is
        only appended while there is room, so a member cannot evict another
        member's real addresses by naming false ones.
        """
        if node_id == self._identity.node_id:
            return
        try:
            parse_address(address)
        except ValueError:
            return
        known = self._address_book.setdefault(node_id, [])
        if address in known:
            return
        if vouched:
            known.insert(0, address)
            del known[_MAX_ADDRESSES_PER_PEER:]
        elif len(known) < _MAX_ADDRESSES_PER_PEER:
            known.append(address)
        else:
            return
        if len(self._address_book) > _MAX_PEERS:
            # Forget the peers we learned of first; members we dial are re-learned from manifests.
            for stale in list(self._address_book)[: len(self._address_book) - _MAX_PEERS]:
                if stale not in self._bootstrap:
                    del self._address_book[stale]
        self._book_dirty.set()
        self._dial.pop(node_id, None)
        self.wake()

    def known_addresses(self) -> dict[str, list[str]]:
        """Per node, addresses to try in order: its own signed manifest's first, then the book."""
        book = {k: list(v) for k, v in self._address_book.items()}
        for node_id, manifest in self._bus.registry.remote_nodes().items():
            own = list(manifest.addresses)
            book[node_id] = own + [a for a in book.get(node_id, []) if a not in own]
        return book

    def wake(self) -> None:
        self._wake.set()

    # running -----------------------------------------------------------------
    async def run(self, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        state = await anyio.to_thread.run_sync(self._load_state)
        listener = await self._listen(state.get("port"))
        try:
            self.bound_port = listener_port(listener)
            self._own = (await anyio.to_thread.run_sync(self.current_addresses))[0]
        except BaseException:  # stopped (or failed) before the accept loop owns the listener
            await anyio.aclose_forcefully(listener)
            raise
        log.info("listening", host=self._listen_host, port=self.bound_port, addresses=self._own)
        self._book_dirty.set()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._accept_loop, listener)
                tg.start_soon(self._dial_loop)
                tg.start_soon(self._save_loop)
                task_status.started(self.bound_port)
        finally:
            # Every link has ended by now (they run in this task group), each noted as gone in
            # the sightings: save them, so "offline since" still holds after a restart.
            with anyio.CancelScope(shield=True):
                try:
                    await anyio.to_thread.run_sync(self._save_state, self._state())
                except OSError as exc:
                    log.warning("peer_state_not_saved", error=type(exc).__name__)

    async def _listen(self, previous_port: Any) -> Any:
        """Bind the configured port; with port 0, try the port we had last time so peers find us again."""
        if self._listen_port == 0 and isinstance(previous_port, int) and 0 < previous_port < 65536:
            try:
                return await create_listener(self._listen_host, previous_port)
            except OSError:
                log.info("previous_port_taken", port=previous_port)
        return await create_listener(self._listen_host, self._listen_port)

    # persistence: where peers were (so a restarted node can find them), and when last seen -----
    def _load_state(self) -> dict[str, Any]:
        if self._state_path is None or not self._state_path.exists():
            return {}
        try:
            state = json.loads(self._state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            log.warning("peer_state_unreadable", path=str(self._state_path))
            return {}
        if not isinstance(state, dict):
            return {}
        self._bus.sightings.load(state.get("seen"))
        peers = state.get("peers", {})
        if isinstance(peers, dict):
            for node_id, addresses in list(peers.items())[:_MAX_PEERS]:
                if isinstance(node_id, str) and isinstance(addresses, list):
                    for a in addresses[:_MAX_ADDRESSES_PER_PEER]:
                        if isinstance(a, str):
                            self.add_address(node_id, a, vouched=False)  # keeps the saved order
        return state

    def _state(self) -> dict[str, Any]:
        """What ``peers.json`` holds, taken on the event loop (the thread only writes it)."""
        return {
            "port": self.bound_port,
            "peers": self.known_addresses(),
            "seen": self._bus.sightings.to_json(),
        }

    def _save_state(self, state: dict[str, Any]) -> None:
        if self._state_path is None:
            return
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self._state_path)

    async def _save_loop(self) -> None:
        while True:
            await self._book_dirty.wait()
            self._book_dirty = anyio.Event()
            try:
                await anyio.to_thread.run_sync(self._save_state, self._state())
            except OSError as exc:
                log.warning("peer_state_not_saved", error=type(exc).__name__)
            await anyio.sleep(1.0)  # coalesce bursts of learned addresses into one write

    async def _accept_loop(self, listener: Any) -> None:
        async with listener:
            await accept_forever(listener, self._inbound_handshake, self._serve)

    async def _inbound_handshake(self, stream: anyio.abc.ByteStream) -> Link | None:
        remote = socket_peer_address(stream, default="?")
        community = self._community_id()
        if community is None:
            await stream.aclose()
            return None
        try:
            return await accept_link(
                stream,
                identity=self._identity,
                community_id=community,
                admit=self._admit,
                remote_address=remote,
                max_frame=self._max_frame,
                handshake_timeout=self._handshake_timeout,
            )
        except BusError as exc:
            log.info("inbound_refused", address=remote, code=exc.code, reason=exc.message)
            await stream.aclose()
            return None
        except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await stream.aclose()
            return None

    def _prefer(self, link: Link) -> bool:
        """Whether ``link`` should replace an existing link to the same peer."""
        low = min(self._identity.node_id, link.peer_id)
        new_by_low = (self._identity.node_id if link.initiator else link.peer_id) == low
        old = self._links.get(link.peer_id)
        if old is None or old.closed:
            return True
        old_by_low = (self._identity.node_id if old.initiator else old.peer_id) == low
        return new_by_low or not old_by_low

    async def _serve(self, link: Link) -> None:
        if not self._prefer(link):
            await link.aclose()
            return
        self._links[link.peer_id] = link
        try:
            await self._bus.attach(link)
        except Exception:
            # A fault on one link must never take the node down.
            log.exception("link_failed", peer=link.peer_id)
        finally:
            if self._links.get(link.peer_id) is link:
                del self._links[link.peer_id]

    async def _dial_loop(self) -> None:
        while True:
            with anyio.move_on_after(1.0):
                await self._wake.wait()
            self._wake = anyio.Event()
            community = self._community_id()
            if community is None or not self._may_dial():
                continue
            now = anyio.current_time()
            for node_id, addresses in self.known_addresses().items():
                if node_id in self._bus.sessions or node_id in self._dialing or not addresses:
                    continue
                if not self._is_member(node_id) and node_id not in self._bootstrap:
                    continue
                state = self._dial.setdefault(node_id, _DialState())
                if state.next_try > now:
                    continue
                self._dialing.add(node_id)
                assert self._tg is not None
                self._tg.start_soon(self._dial_one, node_id, list(addresses), community)

    async def _dial_one(self, node_id: str, addresses: list[str], community: str) -> None:
        """Dial every address of ``node_id`` staggered in parallel; keep the first link made."""
        state = self._dial.setdefault(node_id, _DialState())

        async def attempt(address: str) -> Link:
            host, port = parse_address(address)
            return await open_link(
                host,
                port,
                identity=self._identity,
                community_id=community,
                admit=self._admit,
                expected_peer=node_id,
                max_frame=self._max_frame,
                handshake_timeout=self._handshake_timeout,
            )

        try:
            try:
                _address, link = await dial_first(addresses, attempt, close=_close_link)
            except DialFailed as failed:
                for address, exc in failed.errors.items():
                    code = exc.code if isinstance(exc, BusError) else "bad_request"
                    log.debug("dial_failed", peer=node_id, address=address, code=code)
                revoked = [e for e in failed.errors.values() if isinstance(e, Revoked)]
                if revoked and self._on_refused is not None:
                    await self._on_refused(node_id, revoked[0])
                    if not self._may_dial():
                        return
                state.failures += 1
                state.next_try = anyio.current_time() + min(MAX_BACKOFF, 0.25 * 2**state.failures)
                return
            state.failures = 0
            state.next_try = 0.0
            self._dialing.discard(node_id)
            await self._serve(link)
        finally:
            self._dialing.discard(node_id)

    # peer exchange ---------------------------------------------------------------
    async def _send_peers(self, session: PeerSession) -> None:
        self._book_dirty.set()  # the new peer's manifest addresses are worth remembering
        book = {
            n: a for n, a in self.known_addresses().items() if n in self._bus.sessions or self._is_member(n)
        }
        book[self._identity.node_id] = self.addresses()
        await session.send_quiet({"t": "peers", "peers": book})

    async def _on_peers(self, session: PeerSession, msg: dict[str, Any]) -> None:
        peers = msg.get("peers")
        if not isinstance(peers, dict) or len(peers) > 1000:
            raise ProtocolError("peers message must be a bounded map")
        for node_id, addresses in peers.items():
            if not isinstance(node_id, str) or not isinstance(addresses, list):
                continue
            for a in addresses[:_MAX_ADDRESSES_PER_PEER]:
                if isinstance(a, str):
                    self.add_address(node_id, a, vouched=node_id == session.peer_id)

    async def _after_down(self, session: PeerSession) -> None:
        self._book_dirty.set()  # when it went down is worth remembering (``offline since``)
        state = self._dial.setdefault(session.peer_id, _DialState())
        state.next_try = anyio.current_time() + 0.2
        self.wake()

    async def disconnect_non_members(self) -> list[str]:
        """Close links to peers that are no longer members (revoked)."""
        gone = [p for p in list(self._bus.sessions) if not self._is_member(p)]
        for peer in gone:
            log.info("peer_revoked_disconnect", peer=peer)
            await self._bus.disconnect(peer)
        return gone
