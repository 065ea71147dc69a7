"""The node's HTTP server: the web UI (``specs/ui.md``), in the node's own process.

Starlette on uvicorn, started by the node as a front door (:class:`server.UiServer`); it calls
capabilities through the node's bus, gated by each login's level (:mod:`policy`).
"""
