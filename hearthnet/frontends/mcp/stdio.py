"""``hearthnet mcp``: the MCP server over stdio, calling the running node as its owner.

Stdio is local to the machine and to the user who can open the node's control socket (the
home's owner), like the CLI: the tools run with the owner's rights (``personal`` included,
chats under the names given), through the control socket.  Nothing but MCP goes to stdout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.stdio import stdio_server

from hearthnet.bus.context import CallResult
from hearthnet.contracts.node import NodeClient
from hearthnet.frontends.client.client import AsyncClient
from hearthnet.frontends.mcp.server import build_server

__all__ = ["OwnerCalls", "serve_stdio"]


@dataclass(frozen=True)
class OwnerCalls:
    """The owner's calls through the control socket (``frontends.client.corpora.Calls``)."""

    client: AsyncClient

    @property
    def owner(self) -> bool:
        return True

    @property
    def key(self) -> str:
        return "owner"

    async def call(self, capability: str, **call: Any) -> CallResult:
        return await self.client.call(capability, **call)


async def serve_stdio(home: Path) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin.  The node must run: checked first,
    so a missing node is one error line, not a server whose every call fails."""
    async with AsyncClient(home) as client:
        await NodeClient(client).info(timeout=10.0)
        calls = OwnerCalls(client)
        server = build_server(lambda ctx: calls)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
