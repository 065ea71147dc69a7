"""Archives: external ChromaDB collections (made by another system) served as read-only corpora,
and the seeds' ``search_archives`` tool over them.

Their settings are :mod:`hearthnet.config.archives`.  The names below load their module on
first use (no HTTP client, no numpy until one is needed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hearthnet.runtime.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from hearthnet.services.rag.archives.archive import Archive, archive_clause, map_metadata
    from hearthnet.services.rag.archives.client import ChromaHttpClient, CollectionRef
    from hearthnet.services.rag.archives.embed import embed_query
    from hearthnet.services.rag.archives.merge import ArchiveHit, Ranked, merge_hits
    from hearthnet.services.rag.archives.search_tool import (
        TOOL_NAME,
        ArchiveRef,
        ArchiveSearch,
        SearchOutcome,
        effective_archives,
        format_json,
        format_text,
        tool_schema,
    )

_HOME = {
    "Archive": "archive",
    "archive_clause": "archive",
    "map_metadata": "archive",
    "ChromaHttpClient": "client",
    "CollectionRef": "client",
    "embed_query": "embed",
    "ArchiveHit": "merge",
    "Ranked": "merge",
    "merge_hits": "merge",
    "TOOL_NAME": "search_tool",
    "ArchiveRef": "search_tool",
    "ArchiveSearch": "search_tool",
    "SearchOutcome": "search_tool",
    "effective_archives": "search_tool",
    "format_json": "search_tool",
    "format_text": "search_tool",
    "tool_schema": "search_tool",
}

__all__ = [
    "TOOL_NAME",
    "Archive",
    "ArchiveHit",
    "ArchiveRef",
    "ArchiveSearch",
    "ChromaHttpClient",
    "CollectionRef",
    "Ranked",
    "SearchOutcome",
    "archive_clause",
    "effective_archives",
    "embed_query",
    "format_json",
    "format_text",
    "map_metadata",
    "merge_hits",
    "tool_schema",
]

if not TYPE_CHECKING:  # the type checker sees the imports above, and flags a misspelt name
    __getattr__ = lazy_getattr(__name__, _HOME, globals())
