"""The ``node.addresses`` event: where a node can be dialled, signed by that node.

Data ``{addresses: ["host:port", ...]}`` (1..8 entries, an IPv6 host in brackets, never a
wildcard).  Any current member may emit it, and speaks only for itself (the author is the node
whose addresses they are).  A node's newest record (Lamport order, ties by event id) wins;
members keep it in their log, so the last known list survives restarts, and gossip carries it
to members that had no link to the author.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hearthnet.community.levels import Level
from hearthnet.errors import BadRequest
from hearthnet.events.envelope import Event
from hearthnet.events.rules import EventRule
from hearthnet.transport.addresses import MAX_ADVERTISED, format_address, is_wildcard, split_address

__all__ = ["NODE_ADDRESSES", "newest_addresses", "node_addresses_rule", "validate_node_addresses"]

NODE_ADDRESSES = "node.addresses"


def validate_node_addresses(data: Mapping[str, Any]) -> None:
    if set(data) != {"addresses"}:
        raise BadRequest(f"{NODE_ADDRESSES} data must have exactly the key addresses")
    addresses = data["addresses"]
    if not isinstance(addresses, list) or not 0 < len(addresses) <= MAX_ADVERTISED:
        raise BadRequest(f"{NODE_ADDRESSES}.addresses must be a list of 1..{MAX_ADVERTISED} addresses")
    for address in addresses:
        if not isinstance(address, str) or len(address) > 270:
            raise BadRequest(f"{NODE_ADDRESSES}.addresses must be 'host:port' strings")
        try:
            host, port = split_address(address)
        except ValueError as exc:
            raise BadRequest(f"{NODE_ADDRESSES}: {exc}") from exc
        if format_address(host, port) != address:
            raise BadRequest(f"{NODE_ADDRESSES}: write {address!r} as {format_address(host, port)!r}")
        if is_wildcard(host):
            raise BadRequest(f"{NODE_ADDRESSES}: {address} is a wildcard, not a dialable address")


def node_addresses_rule() -> EventRule:
    return EventRule(event_type=NODE_ADDRESSES, min_level=Level.MEMBER, validate=validate_node_addresses)


def newest_addresses(events: Iterable[Event]) -> dict[str, tuple[tuple[int, str], list[str]]]:
    """Per author, the newest record's ``((lamport, event_id), addresses)``."""
    newest: dict[str, tuple[tuple[int, str], list[str]]] = {}
    for event in events:
        if event.event_type != NODE_ADDRESSES:
            continue
        key = (event.lamport, event.event_id)
        held = newest.get(event.author)
        if held is None or key > held[0]:
            newest[event.author] = (key, list(event.data["addresses"]))
    return newest
