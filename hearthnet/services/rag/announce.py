"""How the RAG service announces documents to the community: through what the node gives it (it
signs and appends an event as this node; it finds this node's ingest event in effect), so the
service never holds the event log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["AppendEvent", "AppendEvents", "FindEvent"]

AppendEvent = Callable[[str, dict[str, Any]], Awaitable[str]]
"""Appends a signed event authored by this node; returns its event id."""
AppendEvents = Callable[[str, list[dict[str, Any]]], Awaitable[list[str]]]
"""Appends several signed events of one type authored by this node, in order, and tells the peers
once; returns their event ids."""
FindEvent = Callable[[str, str], str | None]
"""``(corpus, doc_cid) -> event id`` of this node's ingest event in effect (not deleted since), if any
(blocking: a scan of the log, called from a worker thread)."""
