"""``[network]``: where the node listens for its peers, what it advertises, whether it announces
itself on the LAN, and how its links are kept alive; overridden by ``HEARTHNET_LISTEN``,
``HEARTHNET_ADVERTISE`` (comma-separated), ``HEARTHNET_ADVERTISE_HOST`` (one host, as before),
``HEARTHNET_DISCOVERY``, ``HEARTHNET_KEEPALIVE_SECONDS`` and ``HEARTHNET_DEAD_AFTER_SECONDS``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hearthnet.config.values import (
    check_host,
    flag,
    get,
    host_problem,
    integer,
    parse_listen,
    positive_float,
    seconds,
)
from hearthnet.errors import BadRequest
from hearthnet.transport.addresses import MAX_ADVERTISED, parse_advertise
from hearthnet.wire.frames import DEFAULT_MAX_FRAME

__all__ = ["KEYS", "NetworkConfig", "advertise_entries", "network_env", "network_from"]

KEYS = frozenset(
    {
        "listen",
        "advertise",
        "advertise_host",
        "discovery",
        "max_frame",
        "handshake_timeout",
        "keepalive_seconds",
        "dead_after_seconds",
    }
)
Advertised = tuple[tuple[str, int | None], ...]


@dataclass(frozen=True)
class NetworkConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    advertise: Advertised = ()
    """Addresses peers dial instead of the interfaces' (``(host, port)``; port ``None``: the one
    listened on): ``[network] advertise``, ``--advertise`` (a VPN address)."""
    discovery: bool = True
    """Announce this node and find members on the LAN by mDNS (``specs/transport.md``)."""
    max_frame: int = DEFAULT_MAX_FRAME
    handshake_timeout: float = 5.0
    keepalive_seconds: float = 3.0
    """A link we have written nothing on for this long gets a keepalive frame."""
    dead_after_seconds: float = 10.0
    """A link nothing has arrived on for this long is closed as dead (lid closed, cable pulled): a
    peer that vanished without a word is shown offline, and its calls move on, within this time."""

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise BadRequest("listen_port must be 0..65535")
        if not 0 < 2 * self.keepalive_seconds <= self.dead_after_seconds:
            raise BadRequest(
                f"dead_after_seconds ({self.dead_after_seconds:g}) must be at least twice "
                f"keepalive_seconds ({self.keepalive_seconds:g})"
            )
        if not 64 * 1024 <= self.max_frame <= 64 * 1024 * 1024:
            raise BadRequest("max_frame must be between 64 KiB and 64 MiB")


def network_from(net: Mapping[str, Any]) -> NetworkConfig:
    """``[network]`` of config.toml (its keys checked by the caller)."""
    listen = get(net, "listen", str, None, "network")
    listen_host, listen_port = (
        parse_listen(listen, "[network] listen in config.toml") if listen is not None else ("127.0.0.1", 0)
    )
    entries = get(net, "advertise", list, [], "network")
    advertise_host = get(net, "advertise_host", str, None, "network")
    if advertise_host is not None:  # the older, single-host form of advertise
        check_host(advertise_host, "[network] advertise_host in config.toml")
        entries = [*entries, advertise_host]
    return NetworkConfig(
        listen_host=listen_host,
        listen_port=listen_port,
        advertise=advertise_entries(entries, "[network] advertise in config.toml"),
        discovery=get(net, "discovery", bool, True, "network"),
        max_frame=integer(net, "max_frame", DEFAULT_MAX_FRAME, 1 << 16, "network"),
        handshake_timeout=seconds(net, "handshake_timeout", 5.0, "network"),
        keepalive_seconds=seconds(net, "keepalive_seconds", NetworkConfig.keepalive_seconds, "network"),
        dead_after_seconds=seconds(net, "dead_after_seconds", NetworkConfig.dead_after_seconds, "network"),
    )


def network_env(network: NetworkConfig, env: Mapping[str, str]) -> NetworkConfig:
    """The ``HEARTHNET_*`` overrides of ``[network]``."""
    if "HEARTHNET_LISTEN" in env:
        host, port = parse_listen(env["HEARTHNET_LISTEN"], "HEARTHNET_LISTEN")
        network = replace(network, listen_host=host, listen_port=port)
    if "HEARTHNET_ADVERTISE" in env:
        entries = [e for e in env["HEARTHNET_ADVERTISE"].split(",") if e.strip()]
        network = replace(network, advertise=advertise_entries(entries, "HEARTHNET_ADVERTISE"))
    if "HEARTHNET_ADVERTISE_HOST" in env:
        advertise = check_host(env["HEARTHNET_ADVERTISE_HOST"], "HEARTHNET_ADVERTISE_HOST")
        network = replace(network, advertise=((advertise, None),))
    if "HEARTHNET_DISCOVERY" in env:
        network = replace(network, discovery=flag(env["HEARTHNET_DISCOVERY"], "HEARTHNET_DISCOVERY"))
    keepalive = env.get("HEARTHNET_KEEPALIVE_SECONDS")
    dead_after = env.get("HEARTHNET_DEAD_AFTER_SECONDS")
    if keepalive is not None or dead_after is not None:  # together: one alone may not fit the other's default
        network = replace(
            network,
            keepalive_seconds=network.keepalive_seconds
            if keepalive is None
            else positive_float(keepalive, "HEARTHNET_KEEPALIVE_SECONDS"),
            dead_after_seconds=network.dead_after_seconds
            if dead_after is None
            else positive_float(dead_after, "HEARTHNET_DEAD_AFTER_SECONDS"),
        )
    return network


def advertise_entries(entries: Sequence[object], where: str) -> Advertised:
    """``HOST``/``HOST:PORT`` entries (an IPv6 host bare or in brackets) as ``(host, port)``."""
    if len(entries) > MAX_ADVERTISED:
        raise BadRequest(f"{where}: at most {MAX_ADVERTISED} addresses")
    out: list[tuple[str, int | None]] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise BadRequest(f"{where} must be a list of 'HOST' or 'HOST:PORT' strings, got {entry!r}")
        try:
            host, port = parse_advertise(entry, where)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        problem = host_problem(host)
        if problem is not None:
            raise BadRequest(f"{where}: {problem}")
        out.append((host, port))
    return tuple(dict.fromkeys(out))
