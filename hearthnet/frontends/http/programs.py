"""The programs' side of the node's HTTP server: the OpenAI-compatible gateway, MCP, the ChromaDB
door and TEI's routes, behind the bearer door.

Built by the server beside the web UI's application; the guard hands it ``/v1/*`` and ``/mcp``
after its Host check (``security.Guard``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import anyio

from hearthnet.config import UiConfig
from hearthnet.frontends.http import chroma, gateway, tei
from hearthnet.frontends.http.bearer import BearerDoor, BearerTokens, TokenBucket
from hearthnet.frontends.http.mcp_http import McpEndpoint
from hearthnet.frontends.http.policy import GatedBus
from hearthnet.frontends.http.tokens import TokenStore

__all__ = ["Programs", "build_programs"]


@dataclass
class Programs:
    app: BearerDoor
    mcp: McpEndpoint


def build_programs(
    bus: GatedBus,
    store: TokenStore,
    config: UiConfig,
    node_name: str,
    closing: anyio.Event,
    embedding_model: str,
) -> Programs:
    """``embedding_model``: what the TEI routes serve (this node's, as a TEI server serves one)."""
    mcp = McpEndpoint(bus)
    state = gateway.GatewayState(bus=bus, node_name=node_name, closing=closing, started=int(time.time()))
    extra = [
        *mcp.routes(),
        *chroma.routes(chroma.ChromaState(bus)),
        *tei.routes(tei.TeiState(bus, embedding_model)),
    ]
    app = gateway.build(state, extra)
    door = BearerDoor(
        app,
        tokens=BearerTokens(store),
        bucket=TokenBucket(config.api_requests_per_minute, config.api_burst),
    )
    return Programs(app=door, mcp=mcp)
