"""Members find each other on the LAN with mDNS/DNS-SD (``zeroconf``), service ``_hearthnet._tcp``.

An announcement says only what a stranger may know: a node id and a salted community tag
(TXT ``v=1``, ``id``, ``s`` = a fresh 16-byte salt per announcement, ``t`` = HMAC-SHA256 keyed with
the community id over the salt and the node id, 16 bytes; both base64url), the port and the
addresses.  No name, level or capability; the instance and host names are derived from the node
id, never from the machine's name.  A member recognises another member's tag; a stranger can
neither tell the community nor link two announcements of one community.  Discovery only says
where to dial: the handshake proves membership.

Zeroconf runs in its own threads (its sync API, away from the node's event loop); what it finds
is handed to the loop.  Everything fails soft: without multicast (a loopback-only host, a
sandbox) discovery logs once at debug level and the node carries on without it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import structlog
from zeroconf import ServiceListener

from hearthnet.transport.addresses import format_address, split_address

__all__ = ["SERVICE_TYPE", "LanDiscovery", "announcement", "community_tag", "member_of"]

SERVICE_TYPE = "_hearthnet._tcp.local."
_VERSION = "1"
_TAG_BYTES = 16
_RESOLVE_MS = 3000
_RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
"""When a sighting does not resolve (a busy host, a lost packet), it is tried again after these
waits: the browser reports a name once, so a resolve given up on would never be tried again."""

log = structlog.get_logger("hearthnet.discovery")

Found = Callable[[str, list[str]], None]
"""``found(node_id, ["host:port", ...])``: a member announced where it is (called on the event loop)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def community_tag(community_id: str, salt: bytes, node_id: str) -> str:
    """The tag a member of ``community_id`` announces with ``salt`` (bound to its node id)."""
    mac = hmac.new(community_id.encode(), b"hearthnet/lan/v1\0" + salt + node_id.encode(), hashlib.sha256)
    return _b64(mac.digest()[:_TAG_BYTES])


def announcement(node_id: str, community_id: str, salt: bytes | None = None) -> dict[str, str]:
    """The TXT record of one announcement: a node id and a salted community tag, nothing else."""
    salt = os.urandom(16) if salt is None else salt
    return {"v": _VERSION, "id": node_id, "s": _b64(salt), "t": community_tag(community_id, salt, node_id)}


def member_of(properties: Mapping[bytes | str, Any], community_id: str) -> str | None:
    """The node id an announcement names, if its tag is ``community_id``'s; else ``None``."""
    props = {
        (k.decode("utf-8", "replace") if isinstance(k, bytes) else k): (
            v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        )
        for k, v in properties.items()
    }
    node_id, salt_text, tag = props.get("id"), props.get("s"), props.get("t")
    if props.get("v") != _VERSION or not all(isinstance(x, str) for x in (node_id, salt_text, tag)):
        return None
    assert isinstance(node_id, str) and isinstance(salt_text, str) and isinstance(tag, str)
    if len(node_id) > 128 or len(salt_text) > 64:
        return None
    try:
        salt = base64.urlsafe_b64decode(salt_text + "=" * (-len(salt_text) % 4))
    except ValueError:
        return None
    expected = community_tag(community_id, salt, node_id)
    return node_id if hmac.compare_digest(expected, tag) else None


def instance_label(node_id: str) -> str:
    """The DNS-SD instance (and host) label of a node: a hash of its id, never a machine name."""
    return "hn-" + hashlib.blake2b(node_id.encode(), digest_size=8).hexdigest()


class _Listener(ServiceListener):
    """zeroconf's ServiceBrowser handler: resolve each seen service, hand members to the loop."""

    def __init__(self, owner: LanDiscovery) -> None:
        self._owner = owner

    def add_service(self, zc: Any, type_: str, name: str) -> None:
        self._owner._resolve(zc, type_, name)

    def update_service(self, zc: Any, type_: str, name: str) -> None:
        self._owner._resolve(zc, type_, name)

    def remove_service(self, zc: Any, type_: str, name: str) -> None:
        self._owner._forget(name)


class LanDiscovery:
    """Announce this node and browse for members; :meth:`announce` again when the addresses change."""

    def __init__(self, node_id: str, found: Found) -> None:
        self._node_id = node_id
        self._found = found
        # zeroconf reports every send that fails on some interface (no multicast route, an
        # interface going away) as a warning: discovery is optional, so only its errors show.
        logging.getLogger("zeroconf").setLevel(logging.ERROR)
        self._zc: Any = None
        self._browser: Any = None
        self._community: str | None = None
        self._token: Any = None
        self._lock = threading.Lock()
        self._retry_lock = threading.Lock()
        """Guards :attr:`_retries` only (taken by the browser's thread, which stopping joins:
        never held while waiting on anything else)."""
        self._retries: dict[str, threading.Timer] = {}
        self.working = False
        """Whether the last announcement went out (``doctor`` and ``status`` may say so)."""
        self.error: str | None = None

    async def announce(self, community_id: str, addresses: Sequence[str]) -> bool:
        """(Re)start zeroconf on the interfaces of ``addresses``, announce them and browse.

        True when the announcement went out; False (logged once, at debug level) when multicast
        is not available here.
        """
        self._token = anyio.lowlevel.current_token()
        self._community = community_id
        props = announcement(self._node_id, community_id)
        ok = await anyio.to_thread.run_sync(self._restart, list(addresses), props, abandon_on_cancel=True)
        return ok

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._stop)

    # in zeroconf's and worker threads ------------------------------------------------------
    def _restart(self, addresses: list[str], props: dict[str, str]) -> bool:
        from zeroconf import IPVersion, ServiceBrowser, ServiceInfo, Zeroconf

        with self._lock:
            self._stop_locked()
            hosts, port = _ips_and_port(addresses)
            if not hosts or port is None:
                self.working, self.error = False, "no IP address to announce"
                return False
            loopback_only = all(ipaddress.ip_address(h).is_loopback for h in hosts)
            v6 = any(ipaddress.ip_address(h).version == 6 for h in hosts)
            label = instance_label(self._node_id)
            try:
                zc = Zeroconf(
                    interfaces=["127.0.0.1"] if loopback_only else _all(),
                    ip_version=IPVersion.All if v6 and not loopback_only else IPVersion.V4Only,
                )
                self._zc = zc
                info = ServiceInfo(
                    SERVICE_TYPE,
                    f"{label}.{SERVICE_TYPE}",
                    port=port,
                    properties=props,
                    server=f"{label}.local.",
                    parsed_addresses=hosts,
                )
                zc.register_service(info, allow_name_change=True)
                self._browser = ServiceBrowser(zc, SERVICE_TYPE, listener=_Listener(self))
            except Exception as exc:  # no multicast here (errno varies by OS): discovery is optional
                _close_sockets_in(exc)
                self._stop_locked()
                if self.error is None:
                    log.debug("discovery_unavailable", error=type(exc).__name__, reason=str(exc)[:200])
                self.working, self.error = False, f"{type(exc).__name__}: {exc}"[:200]
                return False
            self.working, self.error = True, None
            return True

    def _stop(self) -> None:
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        browser, zc = self._browser, self._zc
        self._browser = self._zc = None
        with self._retry_lock:
            retries, self._retries = self._retries, {}
        for timer in retries.values():
            timer.cancel()
        try:
            if browser is not None:
                browser.cancel()
            if zc is not None:
                zc.unregister_all_services()
                zc.close()
        except Exception as exc:  # closing a half-started zeroconf: nothing more to do
            log.debug("discovery_close_failed", error=type(exc).__name__)

    def _resolve(self, zc: Any, type_: str, name: str, attempt: int = 0) -> None:
        community = self._community
        if community is None or zc is not self._zc:
            return  # not announcing yet, or a zeroconf since stopped
        try:
            info = zc.get_service_info(type_, name, timeout=_RESOLVE_MS)
        except Exception:  # zeroconf closing under us, a malformed record: ignore the sighting
            return
        if info is None or info.port is None:
            self._retry(zc, type_, name, attempt)
            return
        self._forget(name)  # resolved: no more tries (one may be waiting from an earlier miss)
        node_id = member_of(info.properties or {}, community)
        if node_id is None or node_id == self._node_id:
            return  # a stranger's (or our own) announcement
        found = [format_address(a, info.port) for a in info.parsed_scoped_addresses()][:8]
        if not found:
            return
        try:
            anyio.from_thread.run_sync(self._found, node_id, found, token=self._token)
        except Exception:  # the node is stopping
            return

    def _retry(self, zc: Any, type_: str, name: str, attempt: int) -> None:
        if attempt >= len(_RETRY_S):
            return  # gone for good: the browser reports it again if it comes back
        timer = threading.Timer(_RETRY_S[attempt], self._resolve, (zc, type_, name, attempt + 1))
        timer.daemon = True
        with self._retry_lock:
            if zc is not self._zc:
                return
            previous = self._retries.pop(name, None)
            self._retries[name] = timer
            timer.start()
        if previous is not None:
            previous.cancel()

    def _forget(self, name: str) -> None:
        """No more tries at resolving ``name`` (it resolved, or said goodbye)."""
        with self._retry_lock:
            timer = self._retries.pop(name, None)
        if timer is not None:
            timer.cancel()


def _close_sockets_in(exc: BaseException) -> None:
    """Close the sockets zeroconf opened before it failed (it leaves them to the garbage
    collector, whose ``ResourceWarning`` would land in whatever runs next)."""
    tb = exc.__traceback__
    while tb is not None:
        for value in list(tb.tb_frame.f_locals.values()):
            items = value if isinstance(value, list | tuple) else (value,)
            for item in items:
                if isinstance(item, socket.socket):
                    item.close()
        tb = tb.tb_next


def _all() -> Any:
    from zeroconf import InterfaceChoice

    return InterfaceChoice.All


def _ips_and_port(addresses: Sequence[str]) -> tuple[list[str], int | None]:
    """The IP literals among ``addresses`` and the port they share (the first one's)."""
    hosts: list[str] = []
    port: int | None = None
    for address in addresses:
        try:
            host, p = split_address(address)
            ipaddress.ip_address(host)
        except ValueError:
            continue  # a host name (a VPN's DNS name) is not announced
        if port is None:
            port = p
        if p == port and host not in hosts:
            hosts.append(host)
    return hosts, port
