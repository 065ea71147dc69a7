"""How the RAG service announces documents to the community: through what the node gives it (it
signs and appends an event as this node; it finds this node's ingest event in effect), so the
service never holds the event log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["AppendEvent", "FindEvent"]

AppendEvent = Callable[[str, dict[str, Any]], Awaitable[str]]
"""Appends a signed event authored by this node; returns its event id."""
FindEvent = Callable[[str, str], str | None]
"""``(corpus, doc_cid) -> event id`` of this node's ingest event in effect (not deleted since), if any
(blocking: a scan of the log, called from a worker thread)."""
