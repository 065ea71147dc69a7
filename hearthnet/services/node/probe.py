"""``node.dial_back``: a member asks this node to open a TCP connection to one of the addresses
the member itself advertises, to learn whether other devices can reach it there (``hearthnet
doctor``).  Only addresses in the caller's own signed manifest are dialled, and nothing is sent
on the connection, which is closed as soon as it opens.  A member names its own addresses, so
one that advertised another host's port would learn whether that port answers from here (and
nothing more): two probes at a time per node keep that to a trickle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hearthnet.errors import BadRequest
from hearthnet.transport.probe import PROBE_SECONDS, dial

__all__ = ["DIAL_BACK_SECONDS", "Advertised", "dial_back"]

DIAL_BACK_SECONDS = PROBE_SECONDS

Advertised = Callable[[str], Sequence[str]]
"""``advertised(node_id)``: the addresses in that member's current signed manifest."""


async def dial_back(caller: str, input: dict[str, Any], advertised: Advertised) -> dict[str, Any]:
    """``node.dial_back`` for ``caller``: dial ``input.address`` if the caller advertises it."""
    address = input.get("address")
    if not isinstance(address, str) or not address:
        raise BadRequest("node.dial_back needs input {address: 'host:port'}")
    if address not in advertised(caller):
        raise BadRequest(
            f"{address[:100]!r} is not one of the addresses your node advertises: "
            "node.dial_back only dials its caller's own addresses"
        )
    return await dial(address)
