"""``search_archives`` sends an archive another node serves to that node, over real (in-memory) links.

Node B offers ``rag.query`` for an archive with the params the RAG service registers archives with
(``{corpus, embedding_model, k_max, read_only, chromadb_url, collection_name, layer}``); its
handler here answers as such a ``rag.query`` answers.  Node A runs the tool with an empty
allow-list: whatever B serves it reaches through the bus, nothing else.
"""

from __future__ import annotations

from typing import Any

import pytest

from hearthnet.bus.context import CallContext
from hearthnet.bus.descriptors import CapabilityDescriptor, Registration, shared_keys_equal
from hearthnet.services.rag.archives.search_tool import ArchiveRef, ArchiveSearch, format_text
from tests.unit.bus.test_bus import _ALL, announce, mesh

AIS = "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890"
JINA = "jinaai/jina-embeddings-v2-base-de"


def archive_params(corpus: str, collection: str, layer: str = "chunk") -> dict[str, Any]:
    return {
        "corpus": corpus,
        "embedding_model": JINA,
        "k_max": 20,
        "read_only": True,
        "chromadb_url": "http://chromadb:8000",
        "collection_name": collection,
        "layer": layer,
    }


class ServedArchive:
    """What B's ``rag.query`` for one archive saw, and its answer."""

    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.chunks = chunks

    async def handle(self, ctx: CallContext) -> tuple[dict[str, Any], dict[str, Any]]:
        self.calls.append((dict(ctx.params), dict(ctx.input)))
        return {"chunks": self.chunks[: ctx.input["k"]]}, {
            "corpus": ctx.params["corpus"],
            "embedding_model": JINA,
        }


def registration(params: dict[str, Any], served: ServedArchive) -> Registration:
    descriptor = CapabilityDescriptor("rag.query", (1, 0), params=params, idempotent=True)
    return Registration(descriptor, served.handle, shared_keys_equal)


CHUNKS = [
    {
        "rank": 1,
        "score": 0.81,
        "text": "Audits finden jährlich statt.",
        "metadata": {"chunk_id": "d1:chunk:4", "layer": "chunk", "page": 3, "section_heading": "4.2 Audits"},
    },
    {"rank": 2, "score": "high", "text": "a malformed entry", "metadata": {"chunk_id": "d1:chunk:5"}},
    {
        "rank": 3,
        "score": 0.52,
        "text": "Zweiter Treffer.",
        "metadata": {"chunk_id": "d1:chunk:9", "layer": "chunk"},
    },
]


@pytest.mark.anyio
async def test_an_archive_a_node_serves_is_searched_there_over_the_bus() -> None:
    async with mesh(2) as m:
        _ALL[:] = m.buses  # announce() waits on the peers listed here
        a, b = m.buses
        ais, pages, other, docs = (
            ServedArchive(CHUNKS),
            ServedArchive([]),
            ServedArchive([]),
            ServedArchive([]),
        )
        # first a corpus of B's own store, then the archive's page layer: the registry lists one
        # rag.query of a node per lookup, so the tool must ask for the archive itself
        b.register(registration({"corpus": "docs", "embedding_model": "all-MiniLM-L6-v2", "k_max": 20}, docs))
        b.register(registration(archive_params("ais-pages", AIS, layer="page"), pages))
        b.register(registration(archive_params("ais", AIS), ais))
        b.register(
            registration(archive_params("wartung", "repo_f9e8d7c6-b5a4-3210-fedc-ba0987654321"), other)
        )
        await announce(b)
        tool = ArchiveSearch(a, allowed_urls=[], layer="chunk", query_timeout=5.0, embed_timeout=5.0)
        try:
            ref = ArchiveRef("AIS Management Standard", AIS, "http://ChromaDB:8000/", JINA)
            outcome = await tool.search("Wann finden Audits statt?", [ref], top_k=3)
        finally:
            await tool.aclose()
    assert [(o.status, o.route) for o in outcome.archives] == [("ok", "mesh")]
    assert ais.calls == [
        (
            {
                "corpus": "ais",
                "chromadb_url": "http://chromadb:8000",
                "collection_name": AIS,
                "embedding_model": JINA,
            },
            {"query": "Wann finden Audits statt?", "k": 3, "include_text": True},
        )
    ]
    assert pages.calls == other.calls == docs.calls == []  # the default layer's one, only that archive
    assert format_text(outcome) == (
        "[1] Archiv: AIS Management Standard (Ebene: chunk, Seite: 3, Abschnitt: 4.2 Audits)\n"
        "Audits finden jährlich statt.\n\n---\n\n"
        "[2] Archiv: AIS Management Standard (Ebene: chunk)\nZweiter Treffer."
    )


@pytest.mark.anyio
async def test_an_archive_of_another_model_is_not_that_nodes_and_an_unlisted_server_is_not_asked() -> None:
    async with mesh(2) as m:
        _ALL[:] = m.buses  # announce() waits on the peers listed here
        a, b = m.buses
        ais = ServedArchive(CHUNKS)
        b.register(registration(archive_params("ais", AIS), ais))
        await announce(b)
        tool = ArchiveSearch(a, allowed_urls=[], layer="chunk", query_timeout=5.0, embed_timeout=5.0)
        try:
            ref = ArchiveRef("AIS", AIS, "http://chromadb:8000", "another/model")
            outcome = await tool.search("Audits", [ref], top_k=3)
        finally:
            await tool.aclose()
    assert ais.calls == []
    (fate,) = outcome.archives
    assert (fate.status, fate.route, outcome.status) == ("unavailable", "", "no_archives")
    assert fate.error is not None and "not in this node's rag.archive_urls" in fate.error.message
