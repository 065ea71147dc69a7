"""The configured archives as the RAG service serves them: what is registered (and what is not,
when a store corpus has the name), every write refused, the listing of an archive whose server
is down, and a query with no provider of the archive's model.  The end-to-end proof over a real
ChromaDB and a 3-node mesh is ``tests/integration/test_archives.py``."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from structlog.testing import capture_logs

from hearthnet.config.archives import ArchiveConfig
from hearthnet.errors import BadRequest, Partition
from hearthnet.services.rag.archives.serve import ServedArchives

JINA = "jinaai/jina-embeddings-v2-base-de"


def nothing_listening() -> str:
    """A loopback URL whose port was just free: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


DEAD = nothing_listening()
"""Where every archive of these tests points: no request gets an answer, none leaves the host."""


def config(name: str, url: str = DEAD) -> ArchiveConfig:
    return ArchiveConfig(
        name=name,
        label=f"Archive {name.upper()}",
        collection_name="repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        chromadb_url=url,
        embedding_model=JINA,
    )


class NoProviders:
    """A bus on which no node serves any model."""

    node_id = "ed25519:me"

    def providers(self, *args: Any, **kw: Any) -> list[Any]:
        return []


@dataclass
class Ctx:
    params: dict[str, Any]
    input: dict[str, Any] = field(default_factory=dict)
    is_local: bool = False
    caller: str = "ed25519:peer"
    trace_id: str = "t"


@pytest.fixture
async def served() -> AsyncIterator[ServedArchives]:
    archives = ServedArchives(
        bus=NoProviders(),  # type: ignore[arg-type]
        configs=[config("ais"), config("down"), config("taken")],
        query_timeout=2.0,
        embed_timeout=2.0,
    )
    yield archives
    await archives.aclose()


@pytest.mark.anyio
async def test_each_archive_is_registered_unless_a_store_corpus_has_its_name(served: ServedArchives) -> None:
    with capture_logs() as logs:
        regs = served.registrations(held={"taken", "family"})
    assert sorted(served.names()) == ["ais", "down"]
    assert [e["event"] for e in logs] == ["archive_name_taken"] and logs[0]["corpus"] == "taken"
    by_capability: dict[str, list[dict[str, Any]]] = {}
    for r in regs:
        by_capability.setdefault(r.descriptor.name, []).append(dict(r.descriptor.params))
    assert sorted(by_capability) == ["rag.delete", "rag.list_documents", "rag.query"]
    assert by_capability["rag.query"][0] == {
        "corpus": "ais",
        "embedding_model": JINA,
        "k_max": 20,
        "read_only": True,
        "chromadb_url": DEAD,
        "collection_name": "repo_a1b2c3d4-e5f6-7890-abcd-ef1234567890",
        "layer": "chunk",
    }
    query = next(r for r in regs if r.descriptor.name == "rag.query")
    assert query.predicate is not None
    assert query.predicate(query.descriptor.params, {"corpus": "ais"})
    assert not query.predicate(query.descriptor.params, {"corpus": "ais", "collection_name": "repo_other"})


@pytest.mark.anyio
async def test_every_write_to_an_archive_is_bad_request_naming_it(served: ServedArchives) -> None:
    served.registrations(held=set())
    for what in ("ingest into", "reindex", "delete documents from"):
        with pytest.raises(BadRequest) as info:
            served.refuse_write("ais", what)
        assert info.value.message.startswith(
            f"corpus ais is the archive Archive AIS (ChromaDB collection repo_a1b2c3d4-e5f6-7890-abcd-"
            f"ef1234567890 at {DEAD}), read-only: cannot {what} it"
        )
    served.refuse_write("family", "ingest into")  # not an archive: nothing to refuse
    with pytest.raises(BadRequest, match="read-only: cannot delete documents from it"):
        await served.handle_delete(Ctx({"corpus": "ais"}, {"doc_cid": "blake3:" + "0" * 64}))  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_an_archive_whose_server_is_down_is_listed_offline_with_its_error(
    served: ServedArchives,
) -> None:
    served.registrations(held=set())
    with capture_logs() as logs:
        entries = {e["name"]: e for e in await served.list_entries()}
    down = entries["down"]
    assert (down["read_only"], down["online"], down["chunks"], down["dim"]) == (True, False, None, None)
    assert (
        down["error"]["error"] == "partition"
        and "archive Archive DOWN: ChromaDB at" in down["error"]["message"]
    )
    assert [e["corpus"] for e in logs if e["event"] == "archive_offline"].count("down") == 1
    assert served.health()["down"] == {"online": False}


@pytest.mark.anyio
async def test_a_query_with_no_provider_of_the_archives_model_is_a_partition_naming_it(
    served: ServedArchives,
) -> None:
    served.registrations(held=set())
    with pytest.raises(Partition, match=f"no embed.text provider for model {JINA} is reachable"):
        await served.handle_query(Ctx({"corpus": "ais"}, {"query": "Wartung", "k": 3}))  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match=r"input\.k is 21; at most 20"):
        await served.handle_query(Ctx({"corpus": "ais"}, {"query": "Wartung", "k": 21}))  # type: ignore[arg-type]
