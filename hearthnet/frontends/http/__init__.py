"""The node's HTTP server, in the node's own process: the web UI (``specs/ui.md``) for people, and
for programs the OpenAI-compatible gateway (``/v1/``) and the MCP server (``/mcp``)
(``specs/open_doors.md``).

Starlette on uvicorn, started by the node as a front door (:class:`server.UiServer`); it calls
capabilities through the node's bus, gated by each login's or API key's level (:mod:`policy`).
"""
