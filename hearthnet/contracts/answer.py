"""The ``answer.*`` capabilities' limits that their callers share (the composer, the gateway, MCP).

The composer's capabilities are local-only: the node's own front doors call them.
"""

from __future__ import annotations

__all__ = ["MAX_CORPORA"]

MAX_CORPORA = 64
"""Most corpora one ask queries (asked for by name, or all reachable ones)."""
