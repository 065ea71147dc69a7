"""``rag.search_archives@1.0``: the seeds' ``search_archives`` tool as a capability of this node.

Local-only, like ``answer.ask``: the node's own front doors (the MCP server, the gateway's
``rag_config``, the composer) call it; peers never do.  Input ``{query, top_k?, rag_config?,
format?}``: a call's ``rag_config`` replaces the node's default archives (its
``[[rag.archives]]``) wholly, as in the seeds; without the key the default is searched.
``format: "text"`` (the default) answers ``{status, text}``, the seeds' German text byte for
byte; ``"json"`` answers the structured outcome ``{status, message, merge, results, archives}``.
Only servers in the node's allow-list (``rag.archive_urls`` and the configured archives'
servers) are ever asked directly; see :mod:`.search_tool`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hearthnet.bus.api import BusAPI
from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration
from hearthnet.config.archives import ArchiveConfig, ArchiveDefaults
from hearthnet.contracts.base import check_input_keys
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.services.rag.archives.search_tool import (
    ArchiveSearch,
    SearchOutcome,
    clamp_top_k,
    effective_archives,
    format_json,
    format_text,
)

__all__ = ["CAPABILITY", "ArchiveToolService"]

CAPABILITY = "rag.search_archives"
FORMATS = ("text", "json")
_KEYS = {"query", "top_k", "rag_config", "format"}


class ArchiveToolService:
    """Runs ``search_archives`` calls for this node's front doors."""

    name = "archives"

    def __init__(
        self,
        *,
        bus: BusAPI,
        archives: Sequence[ArchiveConfig],
        allowed_urls: Sequence[str],
        defaults: ArchiveDefaults,
        query_timeout: float,
        embed_timeout: float,
    ) -> None:
        self._bus = bus
        self._defaults = defaults
        self._default_config: dict[str, Any] | None = (
            {
                "archives": [
                    {
                        "name": a.display_name,
                        "collection_name": a.collection_name,
                        "chromadb_url": a.chromadb_url,
                        "embedding_model": a.embedding_model,
                    }
                    for a in archives
                ]
            }
            if archives
            else None
        )
        self._allowed = tuple(allowed_urls)
        self._query_timeout = query_timeout
        self._embed_timeout = embed_timeout
        self._search: ArchiveSearch | None = None
        self.calls = 0

    def registrations(self) -> list[Registration]:
        return [
            Registration(
                CapabilityDescriptor(
                    CAPABILITY,
                    (1, 0),
                    local_only=True,
                    max_concurrent=16,
                    # every archive of a call is embedded and queried within these, 4 at once
                    timeout_seconds=4 * (self._query_timeout + self._embed_timeout) + 5.0,
                    idempotent=True,
                    description="search external ChromaDB archives as the seeds' search_archives tool does",
                ),
                self._handle,
            )
        ]

    async def start(self) -> None:
        self._search = ArchiveSearch(
            self._bus,
            allowed_urls=self._allowed,
            layer=self._defaults.layer,
            query_timeout=self._query_timeout,
            embed_timeout=self._embed_timeout,
            http=None,
        )

    async def stop(self) -> None:
        if self._search is not None:
            await self._search.aclose()
            self._search = None

    def health(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "default_archives": len((self._default_config or {}).get("archives", [])),
        }

    async def _handle(self, ctx: CallContext) -> dict[str, Any]:
        if not ctx.is_local:  # the bus refuses local-only capabilities to peers; never rely on one check
            raise Unauthorized(f"{CAPABILITY} serves this node's own front doors only")
        search = self._search
        if search is None:
            raise BadRequest("the archive search is not running")
        check_input_keys(ctx.input, _KEYS, CAPABILITY)
        form = ctx.input.get("format", "text")
        if form not in FORMATS:
            raise BadRequest(f"input.format must be one of {', '.join(FORMATS)}")
        archives = effective_archives(ctx.input, self._default_config, self._defaults)
        self.calls += 1
        if not archives:
            outcome = SearchOutcome(results=[], merge="score", archives=[])
        else:
            query = ctx.input.get("query")
            if not isinstance(query, str):
                raise BadRequest("input.query must be a non-empty string")
            top_k = clamp_top_k(ctx.input.get("top_k"), self._defaults.top_k)
            outcome = await search.search(query, archives, top_k=top_k)
        if form == "json":
            doc: dict[str, Any] = json.loads(format_json(outcome))
            return doc
        return {"status": outcome.status, "text": format_text(outcome)}
