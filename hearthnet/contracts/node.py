"""The node's own capabilities and the community's, as the front doors call them: ``node.info``,
``node.status`` (this node only: its peers, capabilities and health), ``node.stats``,
``events.list {limit, after}``, ``community.members``, ``community.invite {node_id, level}``,
``member.promote | member.demote {node_id, level}`` and ``member.revoke {node_id, reason}``.
"""

from __future__ import annotations

from typing import Any

from hearthnet.bus.context import CallResult
from hearthnet.contracts.base import Caller

__all__ = [
    "EVENTS_LIST",
    "INFO",
    "INVITE",
    "MEMBERS",
    "MEMBER_DEMOTE",
    "MEMBER_PROMOTE",
    "MEMBER_REVOKE",
    "STATS",
    "STATUS",
    "NodeClient",
    "offers",
]

INFO = "node.info"
PING = "node.ping"
DIAL_BACK = "node.dial_back"
STATUS = "node.status"
STATS = "node.stats"
EVENTS_LIST = "events.list"
MEMBERS = "community.members"
INVITE = "community.invite"
MEMBER_PROMOTE = "member.promote"
MEMBER_DEMOTE = "member.demote"
MEMBER_REVOKE = "member.revoke"


def offers(capability: dict[str, Any], name: str) -> bool:
    """Whether a ``node.status`` capability entry (``{node, capability: "name@X.Y", params}``) is
    of ``name`` (any version)."""
    return str(capability.get("capability", "")).startswith(f"{name}@")


class NodeClient:
    """The node the caller reaches, and through it the community."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller

    async def info(self, *, timeout: float | None = None) -> dict[str, Any]:
        return (await self._caller.call(INFO, timeout=timeout)).output

    async def status(self, *, timeout: float | None = None) -> dict[str, Any]:
        return (await self._caller.call(STATUS, timeout=timeout)).output

    async def ping(self, *, provider: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        """``node.ping`` of ``provider``: its node id and clock (``time_ms``)."""
        return (await self._caller.call(PING, provider=provider, timeout=timeout)).output

    async def dial_back(self, address: str, *, provider: str, timeout: float | None = None) -> dict[str, Any]:
        """``node.dial_back``: whether ``provider`` reaches this node at ``address`` (one it advertises)."""
        result = await self._caller.call(
            DIAL_BACK, input={"address": address}, provider=provider, timeout=timeout
        )
        return result.output

    async def stats(self, *, provider: str | None = None, timeout: float | None = None) -> CallResult:
        return await self._caller.call(STATS, provider=provider, timeout=timeout)

    async def events(self, *, limit: int, after: Any = None) -> dict[str, Any]:
        """One page of ``events.list``: events after the cursor ``after``, oldest first."""
        return (await self._caller.call(EVENTS_LIST, input={"limit": limit, "after": after})).output

    async def members(self) -> dict[str, Any]:
        return (await self._caller.call(MEMBERS)).output

    async def invite(self, node_id: str, level: str) -> dict[str, Any]:
        return (await self._caller.call(INVITE, input={"node_id": node_id, "level": level})).output

    async def promote(self, node_id: str, level: str) -> dict[str, Any]:
        return (await self._caller.call(MEMBER_PROMOTE, input={"node_id": node_id, "level": level})).output

    async def demote(self, node_id: str, level: str) -> dict[str, Any]:
        return (await self._caller.call(MEMBER_DEMOTE, input={"node_id": node_id, "level": level})).output

    async def revoke(self, node_id: str, reason: str) -> dict[str, Any]:
        return (await self._caller.call(MEMBER_REVOKE, input={"node_id": node_id, "reason": reason})).output
