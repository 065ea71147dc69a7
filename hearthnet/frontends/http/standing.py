"""This node's standing in its community, which bounds what any login of its UI may do.

The UI's calls run as the node itself: a login acting above the node's own level would be offered
buttons (invite, promote, upload into a community corpus) that its peers then refuse.  So a login
acts with at most the node's level: the owner is anchor only on an anchor node.  A node alone
(no community yet) has nobody to answer to: its owner stays anchor.  A revoked node keeps what
it holds to read, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from hearthnet.bus.api import BusAPI
from hearthnet.community.levels import Level
from hearthnet.contracts.node import NodeClient
from hearthnet.errors import BusError

__all__ = ["NodeStanding", "Standing", "revoked_text", "standing_of"]

FRESH_SECONDS = 2.0
"""How long a reading of ``node.info`` stands: a promotion or a revocation shows within this."""


@dataclass(frozen=True)
class Standing:
    level: Level
    """The most a login of this node's UI may act as."""
    revoked: str | None = None
    """Why nothing reaches the community any more (a sentence), or ``None``."""


def revoked_text(revoked: Mapping[str, Any]) -> str:
    """``node.info``'s ``revoked`` as a sentence for people."""
    return (
        f"this node was revoked from the community by {revoked.get('by')} at {revoked.get('at')}: "
        "it can no longer reach other members"
    )


def standing_of(info: Mapping[str, Any]) -> Standing:
    """The standing a ``node.info`` answer describes (see the module's docstring)."""
    revoked = info.get("revoked")
    if isinstance(revoked, Mapping):
        return Standing(Level.MEMBER, revoked_text(revoked))
    if info.get("community_id") is None:
        return Standing(Level.ANCHOR)
    level = info.get("level")
    return Standing(Level.parse(level) if isinstance(level, str) else Level.MEMBER)


class NodeStanding:
    """:func:`standing_of` this node, read through the bus at most every ``FRESH_SECONDS``."""

    def __init__(self, bus: BusAPI) -> None:
        self._bus = bus
        self._standing = Standing(Level.MEMBER)
        self._read_at = -FRESH_SECONDS
        self._lock = anyio.Lock()

    async def get(self) -> Standing:
        if time.monotonic() - self._read_at < FRESH_SECONDS:
            return self._standing
        async with self._lock:
            if time.monotonic() - self._read_at >= FRESH_SECONDS:
                try:
                    info = await NodeClient(self._bus).info(timeout=5.0)
                except BusError:
                    return self._standing  # the last reading (member at first): never more than known
                self._standing = standing_of(info)
                self._read_at = time.monotonic()
        return self._standing
