"""The MCP server (the SDK's low-level ``Server``): lists the tools and runs a call as its caller.

Transport-neutral: ``calls_of(ctx)`` says who a request comes from — the owner over stdio, the
API key the HTTP door checked (``ctx.request``, the Starlette request that carried it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext

from hearthnet import __version__
from hearthnet.frontends.client.corpora import Calls
from hearthnet.frontends.mcp.tools import TOOLS, ToolError, run_tool

__all__ = ["INSTRUCTIONS", "build_server"]

INSTRUCTIONS = (
    "HearthNet: the documents of a community's devices. list_corpora shows what can be searched; "
    "ask answers a question with checked citations; rag_query returns passages of corpora; "
    "search_archives searches external document archives (the seeds' rag_config)."
)


def _listed() -> list[types.Tool]:
    return [
        types.Tool(
            name=t.name,
            title=t.title,
            description=t.description,
            input_schema=t.input_schema,
            annotations=types.ToolAnnotations(
                title=t.title, read_only_hint=True, destructive_hint=False, open_world_hint=False
            ),
        )
        for t in TOOLS.values()
    ]


def build_server(calls_of: Callable[[ServerRequestContext[Any, Any]], Calls]) -> Server[Any]:
    """An MCP server whose tool calls run as ``calls_of(ctx)`` says."""
    listed = _listed()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            text, structured = await run_tool(calls_of(ctx), params.name, params.arguments)
        except ToolError as exc:
            wire = exc.error.to_wire()
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"{wire['error']}: {wire['message']}")],
                structured_content=wire,
                is_error=True,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )

    return Server(
        "hearthnet",
        version=__version__,
        title="HearthNet",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
