"""Which addresses a node advertises: the ones its peers can dial, never a wildcard.

A node listening on a wildcard (``0.0.0.0``: every IPv4 interface; ``::``: every IPv6 one, as
anyio binds it IPv6-only) advertises the address of every up, non-loopback interface of the
families it listens on; a node listening on one address advertises that one (loopback only then).
Configured addresses (``[network] advertise``, ``--advertise``: a VPN address) replace the
interface list.  IPv6 link-local addresses (``fe80::/10``) are left out: they need a scope id
(``%eth0``) that names *our* interface, which means nothing on the peer's side; members on the
same link find each other by discovery instead.  :func:`interface_addresses` reads the
interfaces (``ifaddr``; Linux's ``SIOCGIFFLAGS`` for "up"); :func:`select_advertised` is pure.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import ifaddr

__all__ = [
    "MAX_ADVERTISED",
    "IfAddress",
    "format_address",
    "interface_addresses",
    "is_wildcard",
    "parse_advertise",
    "select_advertised",
    "split_address",
]

MAX_ADVERTISED = 8
"""At most this many addresses are advertised (what a peer keeps per node)."""
_SIOCGIFFLAGS = 0x8913
_IFF_UP = 0x1


@dataclass(frozen=True)
class IfAddress:
    """One address of one interface."""

    interface: str
    ip: str
    up: bool = True


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


def format_address(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (``[fd00::2]:7700``)."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (IPv6 in brackets) -> ``(host, port)``; ``ValueError`` if it is not one.

    An IPv6 host without brackets (``::1:7000``, as older nodes wrote it) is read as the
    address before the last colon when that is a valid IPv6 address.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {address!r}")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"not a host:port address: {address!r}")
        host = host[1:-1]
    elif ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise ValueError(f"not a host:port address (IPv6 goes in brackets): {address!r}") from None
    return host, int(port)


def parse_advertise(entry: str, where: str) -> tuple[str, int | None]:
    """One ``--advertise`` / ``[network] advertise`` entry: ``HOST``, ``HOST:PORT``, ``[V6]:PORT``
    or a bare IPv6 address; ``ValueError`` naming ``where`` for a wildcard or a malformed one."""
    text = entry.strip()
    host: str
    port: int | None = None
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ValueError(f"{where}: {entry!r} is not HOST or HOST:PORT")
            port = int(rest[1:])
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        if not port_text.isdigit():
            raise ValueError(f"{where}: {entry!r} is not HOST or HOST:PORT")
        port = int(port_text)
    else:
        host = text  # a name, an IPv4 address, or a bare IPv6 address
    if not host or len(host) > 253 or any(c.isspace() or c in "/%[]" for c in host):
        raise ValueError(f"{where}: {entry!r} is not HOST or HOST:PORT")
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{where}: the port of {entry!r} must be 1..65535")
    if is_wildcard(host):
        raise ValueError(f"{where}: {host} is a wildcard, not an address a peer can dial")
    return host, port


def _is_up(interface: str) -> bool:
    """Whether the interface is administratively up (Linux); true where that cannot be asked."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS, struct.pack("256s", interface.encode()[:15]))
    except OSError:
        return True
    return bool(struct.unpack_from("H", flags, 16)[0] & _IFF_UP)


def interface_addresses() -> list[IfAddress]:
    """Every address of every interface of this host (a few syscalls: cheap enough to poll)."""
    found: list[IfAddress] = []
    for adapter in ifaddr.get_adapters():
        up = _is_up(adapter.name)
        for ip in adapter.ips:
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            found.append(IfAddress(adapter.name, text, up))
    return found


def _rank(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> int:
    """Order of preference: IPv4 on the LAN, then IPv6 (global, ULA), then IPv4 link-local."""
    if ip.version == 4:
        return 2 if ip.is_link_local else 0
    return 1


def select_advertised(
    listen_host: str,
    port: int,
    interfaces: Iterable[IfAddress],
    configured: Sequence[tuple[str, int | None]] = (),
) -> list[str]:
    """The ``host:port`` addresses a node listening on ``listen_host:port`` advertises.

    ``configured`` entries (port ``None``: the listening port) replace the interfaces.  A
    wildcard listen advertises the up, non-loopback interfaces of its families (IPv6 link-local
    left out), or loopback when the host has nothing else; never the wildcard itself.
    """
    if configured:
        out = [format_address(h, port if p is None else p) for h, p in configured]
        return list(dict.fromkeys(out))[:MAX_ADVERTISED]
    if not is_wildcard(listen_host):
        return [format_address(listen_host, port)]
    families = {"0.0.0.0": (4,), "::": (6,), "[::]": (6,)}.get(listen_host, (4, 6))
    chosen: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for entry in interfaces:
        try:
            ip = ipaddress.ip_address(entry.ip.split("%")[0])
        except ValueError:
            continue
        if not entry.up or ip.version not in families or ip.is_loopback or ip.is_unspecified:
            continue
        if ip.is_multicast or (ip.version == 6 and ip.is_link_local) or ip in chosen:
            continue
        chosen.append(ip)
    if not chosen:  # no network at all: this host's own peers can still dial loopback
        return [format_address("::1" if families == (6,) else "127.0.0.1", port)]
    chosen.sort(key=_rank)  # stable: the interfaces' order within a rank
    return [format_address(str(ip), port) for ip in chosen[:MAX_ADVERTISED]]
