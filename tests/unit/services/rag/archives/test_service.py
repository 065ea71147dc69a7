"""``rag.search_archives``: the tool as a capability — local only, strict input, the node's
``[[rag.archives]]`` as the default a call's ``rag_config`` replaces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from hearthnet.config.archives import ArchiveConfig, ArchiveDefaults
from hearthnet.errors import BadRequest, Unauthorized
from hearthnet.services.rag.archives.service import ArchiveToolService

DEFAULT = ArchiveConfig(
    name="ais",
    label="AIS Management Standard",
    collection_name="repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890",
    chromadb_url="http://chromadb:8000",
    embedding_model="jinaai/jina-embeddings-v2-base-de",
)


class NoProviders:
    """A bus on which no node serves any archive (the search then decides by the allow-list)."""

    node_id = "ed25519:me"

    def providers(self, *args: Any, **kw: Any) -> list[Any]:
        return []


@dataclass
class Ctx:
    input: dict[str, Any]
    is_local: bool = True
    capability: str = "rag.search_archives"
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
async def service() -> AsyncIterator[ArchiveToolService]:
    svc = ArchiveToolService(
        bus=NoProviders(),  # type: ignore[arg-type]
        archives=[DEFAULT],
        allowed_urls=[],  # nothing may be asked directly: no request leaves this test
        defaults=ArchiveDefaults(),
        query_timeout=1.0,
        embed_timeout=1.0,
    )
    await svc.start()
    yield svc
    await svc.stop()


@pytest.mark.anyio
async def test_only_this_nodes_front_doors_and_only_known_fields(service: ArchiveToolService) -> None:
    with pytest.raises(Unauthorized):
        await service._handle(Ctx({"query": "x"}, is_local=False))  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="unknown"):
        await service._handle(Ctx({"query": "x", "collection": "y"}))  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="format"):
        await service._handle(Ctx({"query": "x", "format": "xml"}))  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match=r"rag_config.archives\[0\].collection_name"):
        await service._handle(
            Ctx({"query": "x", "rag_config": {"archives": [{"name": "a", "collection_name": "a/b"}]}})  # type: ignore[arg-type]
        )
    [registration] = service.registrations()
    assert registration.descriptor.local_only and registration.descriptor.idempotent


@pytest.mark.anyio
async def test_the_nodes_archives_are_the_default_and_a_calls_rag_config_replaces_them(
    service: ArchiveToolService,
) -> None:
    default = await service._handle(Ctx({"query": "Audit", "format": "json"}))  # type: ignore[arg-type]
    assert [(a["name"], a["status"], a["route"]) for a in default["archives"]] == [
        ("AIS Management Standard", "unavailable", "")  # not in the allow-list: never asked
    ]
    assert default["status"] == "no_archives"
    assert await service._handle(Ctx({"query": "Audit"})) == {  # type: ignore[arg-type]
        "status": "no_archives",
        "text": "Keine Archive verfügbar.",
    }
    for empty in ({}, {"archives": []}, None):
        replaced = await service._handle(Ctx({"query": "Audit", "rag_config": empty, "format": "json"}))  # type: ignore[arg-type]
        assert replaced["archives"] == [] and replaced["status"] == "no_archives"
