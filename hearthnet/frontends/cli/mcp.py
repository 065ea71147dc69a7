"""CLI command ``mcp``: the node's MCP server over stdio, for agents on this computer.

An MCP client starts ``hearthnet mcp`` (``--home`` names the node) and talks JSON-RPC on its
stdin/stdout; the tools call the running node through its control socket as its owner.  A node
that is not running is one ``hearthnet: ...`` line on stderr and exit 1, before any MCP.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio

__all__ = ["add_mcp"]


def cmd_mcp(args: argparse.Namespace) -> None:
    from hearthnet.frontends.mcp.stdio import serve_stdio

    anyio.run(serve_stdio, args.home)


def add_mcp(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "mcp",
        parents=[common],
        help="serve the node's tools to an MCP client over stdio (as the node's owner)",
    )
    p.set_defaults(func=cmd_mcp)
