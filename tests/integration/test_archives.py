"""Archives against a real ``chroma run`` server holding two collections made as the seeds' platform
makes them (``tests/chroma_fixture.py``): one embedded with the node's MiniLM, one with a second
model served by a real TEI-speaking HTTP server on loopback (``tests/tei_server.py``).

The first half drives :class:`Archive` directly; the second runs the ``search_archives`` tool in
this process as a member of a one-node mesh whose node embeds the queries (``embed.text`` with
``params {model}``: MiniLM in-process, the second model through ``[[embedding.openai]]``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from structlog.testing import capture_logs

from hearthnet.config.archives import ArchiveConfig, ArchiveDefaults
from hearthnet.errors import BadRequest, NotFound, Partition
from hearthnet.frontends.client.client import AsyncClient
from hearthnet.services.rag.archives.archive import Archive
from hearthnet.services.rag.archives.search_tool import (
    FAILED,
    NO_ARCHIVES,
    ArchiveRef,
    ArchiveSearch,
    effective_archives,
)
from hearthnet.testing import LocalMesh, MeshNode, member_bus, wait_for
from tests.chroma_fixture import (
    ENGLISH,
    GERMAN,
    BuiltArchive,
    ChromaServer,
    Embed,
    build_archive,
    minilm_embedder,
    tei_embedder,
)
from tests.tei_server import MODEL, TEIServer, ngram_vector
from tests.ui.harness import Ui, owner_link

MINILM = "all-MiniLM-L6-v2"
MODEL_512 = "test/char-ngram-512"
"""A model whose vectors do not fit the second collection (512 against 768)."""


@dataclass
class Archives:
    chroma: ChromaServer
    tei: TEIServer
    minilm: Embed
    english: BuiltArchive
    german: BuiltArchive


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archives]:
    tei = TEIServer({MODEL: 768, MODEL_512: 512})
    chroma = ChromaServer(tmp_path_factory.mktemp("chroma-archives"))
    chroma.start()
    try:
        minilm = minilm_embedder()
        client = chroma.client()
        english = build_archive(client, pdfs=ENGLISH, embed=minilm, embedding_model=MINILM)
        german = build_archive(client, pdfs=GERMAN, embed=tei_embedder(tei.url), embedding_model=MODEL)
        yield Archives(chroma, tei, minilm, english, german)
    finally:
        chroma.stop()
        tei.close()


class Requests:
    """Every request an archive's HTTP client sends (path only), seen by an httpx event hook."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.client = httpx.AsyncClient(event_hooks={"request": [self._record]})

    async def _record(self, request: httpx.Request) -> None:
        self.paths.append(request.url.path)

    def queries(self) -> list[str]:
        return [p for p in self.paths if p.endswith("/query")]


@pytest.fixture
async def requests() -> AsyncIterator[Requests]:
    seen = Requests()
    yield seen
    await seen.client.aclose()


def english_archive(a: Archives, requests: Requests, **extra: Any) -> Archive:
    config = ArchiveConfig(
        **{
            "name": "creativity",
            "collection_name": a.english.collection_name,
            "chromadb_url": a.chroma.url,
            "embedding_model": MINILM,
            "label": "Creativity in ML",
            **extra,
        }
    )
    return Archive(config, timeout=5.0, http=requests.client)


def german_archive(a: Archives, requests: Requests, **extra: Any) -> Archive:
    config = ArchiveConfig(
        **{
            "name": "topologie",
            "collection_name": a.german.collection_name,
            "chromadb_url": a.chroma.url,
            "embedding_model": MODEL,
            "label": "Topologie-Skript",
            **extra,
        }
    )
    return Archive(config, timeout=5.0, http=requests.client)


# --------------------------------------------------------------------------- Archive


@pytest.mark.anyio
async def test_the_minilm_archive_answers_the_right_chunk_with_page_and_section(
    archives: Archives, requests: Requests
) -> None:
    archive = english_archive(archives, requests)
    assert archive.read_only
    query = "Chatbots are computer programs which participate in chat rooms as autonomous agents"
    vector = archives.minilm([query])[0]
    hits = await archive.query(vector, k=3)
    (expected,) = archives.english.chunks_with("participate in chat rooms as autonomous agents")
    assert expected.id in [h.chunk_id for h in hits]
    assert {(h.metadata["layer"], h.metadata["page"], h.metadata["section_heading"]) for h in hits[:2]} == {
        ("chunk", 4, "B. Chatbots")
    }
    top = next(h for h in hits if h.chunk_id == expected.id)
    stored = expected
    assert top.text == stored.text
    assert top.metadata["document_id"] in archives.english.documents
    assert top.metadata["chunk_index"] == stored.metadata["chunk_index"]
    assert "text_preview" not in top.metadata and "page_number" not in top.metadata
    # score = 1 - cosine distance: the cosine of the query and the stored chunk's vector
    cosine = float(np.dot(vector, archives.minilm([stored.text])[0]))
    assert top.score == pytest.approx(cosine, abs=1e-3)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.anyio
async def test_the_second_models_archive_answers_the_right_chunk(
    archives: Archives, requests: Requests
) -> None:
    phrase = "(ii) Symmetrie: d(x,y) = d(y,x)"
    holding = {s.id: s for s in archives.german.chunks_with(phrase)}
    archive = german_archive(archives, requests)
    hits = await archive.query(ngram_vector("Symmetrie d(x,y) = d(y,x) Dreiecksungleichung Metrik"), k=3)
    top = hits[0]
    assert top.chunk_id in holding
    stored = holding[top.chunk_id].metadata
    assert (top.metadata["page"], top.metadata["section_heading"]) == (
        stored["page_number"],
        stored["section_heading"],
    )
    assert (top.metadata["page"], top.metadata["section_heading"]) == (10, "1.2 Metrische Räume")


@pytest.mark.anyio
async def test_the_chunk_layer_is_searched_by_default_and_a_filter_joins_it(
    archives: Archives, requests: Requests
) -> None:
    """A page's own text is nearest to its ``page`` segment, yet by default only chunks answer; a
    caller's filter is combined with the layer; a filter naming ``layer`` chooses it."""
    page4 = next(s for s in archives.english.layer("page") if s.metadata["page_number"] == 4)
    vector = archives.minilm([page4.text])[0]
    archive = english_archive(archives, requests)
    hits = await archive.query(vector, k=20)
    assert len(hits) == 20 and {h.metadata["layer"] for h in hits} == {"chunk"}
    on_page_3 = await archive.query(vector, k=20, where={"page": {"$eq": 3}})
    assert on_page_3 and {(h.metadata["layer"], h.metadata["page"]) for h in on_page_3} == {("chunk", 3)}
    assert len(on_page_3) == sum(1 for s in archives.english.layer("chunk") if s.metadata["page_number"] == 3)
    sections = await archive.query(vector, k=5, where={"layer": {"$eq": "section"}})
    assert {h.metadata["layer"] for h in sections} == {"section"}
    pages = await english_archive(archives, requests, layer="page").query(vector, k=2)
    assert pages[0].chunk_id == page4.id and pages[0].score == pytest.approx(1.0, abs=1e-3)
    assert {h.metadata["layer"] for h in pages} == {"page"}


@pytest.mark.anyio
async def test_a_vector_of_the_wrong_dimension_is_refused_before_chromadb_is_queried(
    archives: Archives, requests: Requests
) -> None:
    archive = german_archive(archives, requests, embedding_model=MINILM)  # 384-d into a 768-d collection
    minilm_vector = archives.minilm(["Metrische Räume"])[0]
    for _ in range(2):
        with pytest.raises(BadRequest) as info:
            await archive.query(minilm_vector, k=3)
        assert "query vector has 384 dimensions" in info.value.message
        assert (
            f"collection {archives.german.collection_name} holds 768-dimensional vectors"
            in info.value.message
        )
        assert MINILM in info.value.message
    assert requests.paths and requests.queries() == []  # it looked the collection up, never queried it


@pytest.mark.anyio
async def test_a_missing_collection_is_not_found(archives: Archives, requests: Requests) -> None:
    missing = f"repo_{uuid.uuid4()}"
    archive = english_archive(archives, requests, collection_name=missing)
    with pytest.raises(NotFound, match=f"archive Creativity in ML: collection {missing} does not exist"):
        await archive.query(archives.minilm(["anything"])[0], k=3)
    with pytest.raises(NotFound):
        await archive.info()
    assert archive.online is True  # the server answered


@pytest.mark.anyio
async def test_chromadb_stopped_is_a_partition_and_the_archive_comes_back(
    archives: Archives, requests: Requests
) -> None:
    archive = english_archive(archives, requests)
    vector = archives.minilm(["drawing robots"])[0]
    assert await archive.query(vector, k=2)
    archives.chroma.stop()
    try:
        with pytest.raises(Partition, match=f"archive Creativity in ML: ChromaDB at {archives.chroma.url}"):
            await archive.query(vector, k=2)
        assert archive.online is False
        with pytest.raises(Partition):
            await archive.info()
    finally:
        archives.chroma.start()
    assert [h.metadata["layer"] for h in await archive.query(vector, k=2)] == ["chunk", "chunk"]
    assert archive.online is True


@pytest.mark.anyio
async def test_info_gives_count_dimension_and_documents(archives: Archives, requests: Requests) -> None:
    en = await english_archive(archives, requests).info()
    assert (en.name, en.label, en.read_only, en.embedding_model) == (
        "creativity",
        "Creativity in ML",
        True,
        MINILM,
    )
    assert (en.chunks, en.dim, en.docs) == (len(archives.english.segments), 384, 2)
    assert en.details == {
        "collection_name": archives.english.collection_name,
        "chromadb_url": archives.chroma.url,
        "layer": "chunk",
        "space": "cosine",
    }
    de = await german_archive(archives, requests).info()
    assert (de.chunks, de.dim, de.docs) == (len(archives.german.segments), 768, 1)


@pytest.mark.anyio
async def test_documents_are_listed_from_the_document_layer(archives: Archives, requests: Requests) -> None:
    archive = english_archive(archives, requests)
    listed = await archive.list_documents()
    assert {d.doc_id for d in listed} == set(archives.english.documents)
    assert all(d.metadata["repository_id"] == archives.english.repository_id for d in listed)
    assert all("layer" not in d.metadata and "text_preview" not in d.metadata for d in listed)
    first, second = await archive.list_documents(limit=1), await archive.list_documents(limit=1, offset=1)
    assert [first[0].doc_id, second[0].doc_id] == [d.doc_id for d in listed]
    with pytest.raises(BadRequest, match="limit must be 1-1000"):
        await archive.list_documents(limit=0)


@pytest.mark.anyio
async def test_a_collection_without_a_document_layer_is_listed_by_its_document_ids(
    archives: Archives, requests: Requests
) -> None:
    name = f"repo_{uuid.uuid4()}"
    chunks = archives.german.layer("chunk")[:6]
    col = archives.chroma.client().create_collection(
        name, metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    doc_a, doc_b = str(uuid.uuid4()), str(uuid.uuid4())
    col.add(
        ids=[s.id for s in chunks],
        embeddings=[ngram_vector(s.text) for s in chunks],
        documents=[s.text for s in chunks],
        metadatas=[{**s.metadata, "document_id": doc_a if i < 4 else doc_b} for i, s in enumerate(chunks)],
    )
    listed = await german_archive(archives, requests, collection_name=name).list_documents()
    assert [(d.doc_id, d.chunks) for d in listed] == sorted([(doc_a, 4), (doc_b, 2)])
    assert all("page" not in d.metadata and "chunk_index" not in d.metadata for d in listed)


@pytest.mark.anyio
async def test_a_collection_recreated_under_its_name_is_found_again(
    archives: Archives, requests: Requests
) -> None:
    """The archive keeps the collection's id between queries; when the platform rebuilds the
    collection (a new id), the next query looks the name up again instead of failing."""
    name = f"repo_{uuid.uuid4()}"
    client = archives.chroma.client()

    def fill(text: str) -> None:
        col = client.create_collection(name, metadata={"hnsw:space": "cosine"}, embedding_function=None)
        col.add(
            ids=["d:chunk:0"], embeddings=[[1.0, 0.0, 0.0]], documents=[text], metadatas=[{"layer": "chunk"}]
        )

    fill("first build")
    archive = english_archive(archives, requests, collection_name=name)
    assert [h.text for h in await archive.query([1.0, 0.0, 0.0], k=1)] == ["first build"]
    client.delete_collection(name)
    fill("second build")
    assert [h.text for h in await archive.query([1.0, 0.0, 0.0], k=1)] == ["second build"]


# --------------------------------------------------------------------------- search_archives


@pytest.fixture(scope="module")
def mesh(archives: Archives, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalMesh]:
    """Three nodes: ``emb`` embeds with MiniLM in-process and with the TEI server's two models
    (``[[embedding.openai]]``) and hosts the local corpus ``drafts``; ``host`` serves the archives
    (``[[rag.archives]]``) and embeds nothing, so its queries are embedded on ``emb`` over the bus;
    ``reader`` runs neither RAG nor an embedder and asks both.  ``agent`` is this test process, a
    member connected to ``emb`` only."""
    m = LocalMesh(tmp_path_factory.mktemp("archives-mesh"))
    try:
        emb = m.add("emb")
        with (emb.home / "config.toml").open("a") as f:
            for model, dim in ((MODEL, 768), (MODEL_512, 512)):
                f.write(f'\n[[embedding.openai]]\nbase_url = "{archives.tei.url}"\n')
                f.write(f'model = "{model}"\ndim = {dim}\n')
        host = m.add("host", env={"HEARTHNET_EMBEDDING": "0"})
        with (host.home / "config.toml").open("a") as f:
            for name, label, collection, model in served_archives(archives):
                f.write(f'\n[[rag.archives]]\nname = "{name}"\nlabel = "{label}"\n')
                f.write(f'collection_name = "{collection}"\nchromadb_url = "{archives.chroma.url}"\n')
                f.write(f'embedding_model = "{model}"\n')
        reader = m.add(
            "reader",
            env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "HEARTHNET_UI_LISTEN": "127.0.0.1:0"},
        )
        m.found(emb)
        m.invite(emb, host, "trusted")
        m.invite(emb, reader, "trusted")
        m.invite(emb, m.add("agent"), "member", start=False)
        m.wait_full_mesh([emb, host, reader])
        wait_for(
            lambda: (
                {
                    c["params"].get("model")
                    for c in emb.status()["capabilities"]
                    if c["capability"] == "embed.text@1.0"
                }
                >= {MINILM, MODEL, MODEL_512}
            ),
            timeout=90,
            what="the node to serve embed.text for MiniLM and both TEI models",
        )
        wait_for(
            lambda: (
                {
                    c["params"].get("corpus")
                    for c in reader.status()["capabilities"]
                    if c["capability"] == "rag.query@1.0" and c["node"] == host.node_id
                }
                >= {"creativity", "topologie"}
            ),
            timeout=60,
            what="the reader to see the host's archives",
        )
        yield m
    finally:
        m.close()


def served_archives(a: Archives) -> list[tuple[str, str, str, str]]:
    """``host``'s ``[[rag.archives]]``: name, label, collection, model."""
    return [
        ("creativity", "Creativity in ML", a.english.collection_name, MINILM),
        ("topologie", "Topologie-Skript", a.german.collection_name, MODEL),
        ("falschdim", "Falsche Dimension", a.german.collection_name, MODEL_512),
        ("verloren", "Verloren", MISSING_COLLECTION, MINILM),
    ]


MISSING_COLLECTION = f"repo_{uuid.uuid4()}"


def rag_config(*entries: tuple[str, str, str, str]) -> dict[str, Any]:
    return {
        "rag_config": {
            "archives": [
                {"name": n, "collection_name": c, "chromadb_url": u, "embedding_model": e}
                for n, c, u, e in entries
            ]
        }
    }


@pytest.fixture
async def tool(mesh: LocalMesh, archives: Archives, requests: Requests) -> AsyncIterator[ArchiveSearch]:
    node: MeshNode = mesh.nodes["emb"]
    async with member_bus(node, mesh.nodes["agent"].home) as bus:
        yield ArchiveSearch(
            bus,
            allowed_urls=[archives.chroma.url],
            layer="chunk",
            query_timeout=5.0,
            embed_timeout=20.0,
            http=requests.client,
        )


def both(a: Archives) -> dict[str, Any]:
    return rag_config(
        ("Creativity in ML", a.english.collection_name, a.chroma.url, MINILM),
        ("Topologie-Skript", a.german.collection_name, a.chroma.url, MODEL),
    )


@pytest.mark.anyio
async def test_the_tool_searches_both_archives_embedding_through_the_bus_and_fuses_by_rank(
    archives: Archives, tool: ArchiveSearch
) -> None:
    refs = effective_archives(both(archives), None, ArchiveDefaults())
    tei_before = len(archives.tei.requests)
    answer = json.loads(
        await tool.run(
            {"query": "Metrische Räume und Chatbots", "top_k": 6}, refs, default_top_k=5, as_json=True
        )
    )
    assert answer["status"] == "ok" and answer["merge"] == "rrf"
    assert [(a["status"], a["route"], a["hits"]) for a in answer["archives"]] == [("ok", "direct", 6)] * 2
    assert len(answer["results"]) == 6
    assert {r["archive"] for r in answer["results"]} == {"Creativity in ML", "Topologie-Skript"}
    assert [r["rank"] for r in answer["results"]] == [1, 2, 3, 4, 5, 6]
    # the second model's query was embedded once, by the node's TEI backend, over OpenAI's route
    assert archives.tei.requests[tei_before:] == [("/v1/embeddings", MODEL, 1)]
    with capture_logs() as logs:  # a search that partly fails: logged by code, never by text
        unserved = [
            *refs,
            ArchiveRef("Ohne Modell", archives.german.collection_name, archives.chroma.url, "x/y"),
        ]
        await tool.run({"query": "Metrische Räume und Chatbots"}, unserved, default_top_k=5, as_json=False)
    logged = repr(logs)
    assert "archive_search_failed" in logged
    assert "Metrische" not in logged and all(r["text"][:30] not in logged for r in answer["results"])
    text = await tool.run(
        {"query": "Chatbots in chat rooms", "top_k": 2}, refs, default_top_k=5, as_json=False
    )
    passages = text.split("\n\n---\n\n")
    assert len(passages) == 2 and all(p.startswith(("[1] Archiv: ", "[2] Archiv: ")) for p in passages)
    assert passages[0].split("\n")[0] in {
        "[1] Archiv: Creativity in ML (Ebene: chunk, Seite: 4, Abschnitt: B. Chatbots)",
        "[1] Archiv: Topologie-Skript (Ebene: chunk, Seite: 10, Abschnitt: 1.2 Metrische Räume)",
    }


@pytest.mark.anyio
async def test_one_model_is_ranked_by_score_as_the_archive_itself_ranks(
    archives: Archives, tool: ArchiveSearch, requests: Requests
) -> None:
    refs = effective_archives(
        rag_config(("Creativity in ML", archives.english.collection_name, archives.chroma.url, MINILM)),
        None,
        ArchiveDefaults(),
    )
    query = "A drawing robot sketches portraits with a pen-plotter"
    outcome = await tool.search(query, refs, top_k=4)
    assert outcome.merge == "score" and outcome.status == "ok"
    direct = await english_archive(archives, requests).query(archives.minilm([query])[0], k=4)
    assert [r.hit.hit.chunk_id for r in outcome.results] == [h.chunk_id for h in direct]
    for ranked, hit in zip(outcome.results, direct, strict=True):
        assert ranked.fused == pytest.approx(hit.score, abs=1e-4)  # embedded on the node, same model


@pytest.mark.anyio
async def test_a_model_of_the_wrong_dimension_is_the_clear_error_and_chromadb_is_not_queried(
    archives: Archives, tool: ArchiveSearch, requests: Requests
) -> None:
    refs = effective_archives(
        rag_config(("Topologie-Skript", archives.german.collection_name, archives.chroma.url, MODEL_512)),
        None,
        ArchiveDefaults(),
    )
    answer = json.loads(await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=True))
    (fate,) = answer["archives"]
    assert (answer["status"], fate["status"], fate["error"]["error"]) == ("failed", "failed", "bad_request")
    assert "query vector has 512 dimensions" in fate["error"]["message"]
    assert "holds 768-dimensional vectors" in fate["error"]["message"]
    assert requests.queries() == []
    assert await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=False) == FAILED


@pytest.mark.anyio
async def test_a_model_no_node_serves_is_a_partition_naming_it(
    archives: Archives, tool: ArchiveSearch
) -> None:
    refs = effective_archives(
        rag_config(
            ("Topologie-Skript", archives.german.collection_name, archives.chroma.url, "nobody/serves-this")
        ),
        None,
        ArchiveDefaults(),
    )
    answer = json.loads(await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=True))
    error = answer["archives"][0]["error"]
    assert error["error"] == "partition"
    assert "no embed.text provider for model nobody/serves-this is reachable" in error["message"]
    assert await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=False) == FAILED


@pytest.mark.anyio
async def test_a_server_outside_the_allow_list_is_never_asked(
    archives: Archives, tool: ArchiveSearch
) -> None:
    with TEIServer() as elsewhere:  # any HTTP server on loopback: it must see no request at all
        refs = effective_archives(
            rag_config(("Fremd", archives.german.collection_name, elsewhere.url, MODEL)),
            None,
            ArchiveDefaults(),
        )
        answer = json.loads(await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=True))
        assert answer["archives"][0]["status"] == "unavailable"
        assert "not in this node's rag.archive_urls" in answer["archives"][0]["error"]["message"]
        assert await tool.run({"query": "Stetigkeit"}, refs, default_top_k=5, as_json=False) == NO_ARCHIVES
    assert elsewhere.requests == [] and elsewhere.connections == 0  # not one request, not even a connection


@pytest.mark.anyio
async def test_unreachable_or_missing_archives_are_skipped_as_the_seed_skips_them(
    archives: Archives, tool: ArchiveSearch
) -> None:
    missing = rag_config(("Verloren", f"repo_{uuid.uuid4()}", archives.chroma.url, MINILM))["rag_config"][
        "archives"
    ]
    refs = effective_archives(
        {"rag_config": {"archives": both(archives)["rag_config"]["archives"] + missing}},
        None,
        ArchiveDefaults(),
    )
    answer = json.loads(await tool.run({"query": "Chatbots"}, refs, default_top_k=3, as_json=True))
    assert [a["status"] for a in answer["archives"]] == ["ok", "ok", "unavailable"]
    assert answer["archives"][2]["error"]["error"] == "not_found"
    assert answer["status"] == "ok" and len(answer["results"]) == 3
    archives.chroma.stop()
    try:
        down = json.loads(await tool.run({"query": "Chatbots"}, refs, default_top_k=3, as_json=True))
        assert {a["error"]["error"] for a in down["archives"]} == {"partition"}
        assert await tool.run({"query": "Chatbots"}, refs, default_top_k=3, as_json=False) == NO_ARCHIVES
    finally:
        archives.chroma.start()
    assert (
        json.loads(await tool.run({"query": "Chatbots"}, refs, default_top_k=3, as_json=True))["status"]
        == "ok"
    )


# --------------------------------------------------------------------------- served by a node


def query_json(node: MeshNode, *args: str) -> tuple[int, dict[str, Any], str]:
    """``hearthnet query ... --json`` on ``node``: exit code, the document (``{}`` if none), stderr."""
    proc = node.cli("query", *args, "--json", check=False)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_archives_are_listed_read_only_with_count_and_dimension(mesh: LocalMesh, archives: Archives) -> None:
    reader, host = mesh.nodes["reader"], mesh.nodes["host"]
    listed = {c["name"]: c for c in reader.cli_json("corpora")["corpora"] if c["node"] == host.node_id}
    assert set(listed) == {"creativity", "topologie", "falschdim", "verloren"}
    en, de = listed["creativity"], listed["topologie"]
    assert (en["read_only"], en["label"], en["dim"], en["chunks"], en["docs"], en["embedding_model"]) == (
        True,
        "Creativity in ML",
        384,
        len(archives.english.segments),
        2,
        MINILM,
    )
    assert (de["dim"], de["chunks"], de["collection_name"]) == (
        768,
        len(archives.german.segments),
        archives.german.collection_name,
    )
    assert listed["verloren"]["error"]["error"] == "not_found" and listed["verloren"]["chunks"] is None
    text = reader.cli("corpora").stdout
    line = next(x for x in text.splitlines() if x.startswith("creativity"))
    assert "ARCHIVE, read-only: Creativity in ML" in line and "384-d" in line
    assert "UNREACHABLE: not_found" in next(x for x in text.splitlines() if x.startswith("verloren"))
    docs = reader.cli_json("docs", "--corpus", "creativity")
    assert (docs["node"], docs["total"]) == (host.node_id, 2)
    assert {d["doc_cid"] for d in docs["documents"]} == set(archives.english.documents)
    assert all(d["metadata"]["repository_id"] == archives.english.repository_id for d in docs["documents"])
    assert "2 documents in creativity" in reader.cli("docs", "--corpus", "creativity").stdout


def test_a_query_from_another_node_returns_the_right_segments_with_pages_and_sections(
    mesh: LocalMesh, archives: Archives
) -> None:
    """``reader`` asks; ``host`` serves the archive and has the query embedded on ``emb``."""
    reader, host = mesh.nodes["reader"], mesh.nodes["host"]
    code, doc, _ = query_json(
        reader,
        "Chatbots are computer programs which participate in chat rooms as autonomous agents",
        "--corpus",
        "creativity",
        "-k",
        "3",
    )
    assert code == 0 and doc["provider"] == host.node_id
    assert doc["meta"]["embedding_model"] == MINILM and doc["meta"]["read_only"] is True
    (expected,) = archives.english.chunks_with("participate in chat rooms as autonomous agents")
    found = {c["metadata"]["chunk_id"]: c for c in doc["chunks"]}
    assert expected.id in found and found[expected.id]["text"] == expected.text
    top = doc["chunks"][0]
    assert (top["metadata"]["layer"], top["metadata"]["page"], top["metadata"]["section_heading"]) == (
        "chunk",
        4,
        "B. Chatbots",
    )
    code, doc, _ = query_json(
        reader, "Symmetrie d(x,y) = d(y,x) Dreiecksungleichung Metrik", "--corpus", "topologie", "-k", "2"
    )
    top = doc["chunks"][0]
    assert top["metadata"]["chunk_id"] in {
        s.id for s in archives.german.chunks_with("(ii) Symmetrie: d(x,y) = d(y,x)")
    }
    assert (top["metadata"]["page"], top["metadata"]["section_heading"]) == (10, "1.2 Metrische Räume")
    # the layer default holds, and the caller's filter joins it
    code, doc, _ = query_json(
        reader, "creativity", "--corpus", "creativity", "-k", "20", "--filter", '{"page": {"$eq": 3}}'
    )
    assert code == 0 and doc["chunks"]
    assert {(c["metadata"]["layer"], c["metadata"]["page"]) for c in doc["chunks"]} == {("chunk", 3)}
    text = reader.cli("query", "autonomous agents in chat rooms", "--corpus", "creativity", "-k", "1").stdout
    assert "p.4  § B. Chatbots" in text
    # no keyword index in an archive: dense answers, said in meta only when another mode was asked
    assert doc["meta"]["mode"] == "dense" and "mode_requested" not in doc["meta"]
    assert all(c["similarity"] == c["score"] for c in doc["chunks"])
    code, doc, _ = query_json(reader, "chat rooms", "--corpus", "creativity", "--mode", "keyword")
    assert code == 0 and doc["meta"]["mode"] == "dense" and doc["meta"]["mode_requested"] == "keyword"
    assert "without a keyword index" in doc["meta"]["warnings"][0]
    for node in (host, mesh.nodes["emb"], reader):  # ids, counts and codes only: never text
        assert node.log_path is not None
        logged = node.log_path.read_text(errors="replace")
        assert "autonomous agents" not in logged and "Symmetrie" not in logged
        assert expected.text[:40] not in logged


def test_several_corpora_merge_by_score_for_one_model_and_by_rrf_across_models(mesh: LocalMesh) -> None:
    reader, host, emb = mesh.nodes["reader"], mesh.nodes["host"], mesh.nodes["emb"]
    ensure_drafts(mesh)
    code, doc, _ = query_json(
        reader, "Metrische Räume und Chatbots", "--corpus", "creativity", "--corpus", "topologie", "-k", "6"
    )
    assert code == 0 and doc["merge"] == "rrf" and len(doc["chunks"]) == 6
    assert {c["corpus"] for c in doc["chunks"]} == {"creativity", "topologie"}
    assert {c["node"] for c in doc["chunks"]} == {host.node_id}
    assert [c["status"] for c in doc["corpora"]] == ["ok", "ok"]
    fused = [c["fused"] for c in doc["chunks"]]
    assert fused == sorted(fused, reverse=True) and all(f <= 2 / 61 + 1e-9 for f in fused)
    code, doc, _ = query_json(reader, "heating oil delivery", "--corpus", "drafts", "--corpus", "creativity")
    assert code == 0 and doc["merge"] == "score"
    scores = [c["score"] for c in doc["chunks"]]
    assert scores == sorted(scores, reverse=True)
    assert doc["chunks"][0]["corpus"] == "drafts" and doc["chunks"][0]["node"] == emb.node_id
    text = reader.cli("query", "Metrische Räume", "--corpus", "creativity", "--corpus", "topologie").stdout
    assert "[topologie @ host]" in text and "(merged by reciprocal rank fusion)" in text


def test_a_failed_corpus_is_named_and_only_all_failing_is_an_error(mesh: LocalMesh) -> None:
    reader = mesh.nodes["reader"]
    code, doc, _err = query_json(
        reader, "Chatbots", "--corpus", "creativity", "--corpus", "verloren", "-k", "2"
    )
    assert code == 0 and len(doc["chunks"]) == 2
    fates = {c["corpus"]: c for c in doc["corpora"]}
    assert fates["creativity"]["status"] == "ok"
    assert fates["verloren"]["status"] == "failed" and fates["verloren"]["error"]["error"] == "not_found"
    proc = reader.cli("query", "Chatbots", "--corpus", "creativity", "--corpus", "verloren", check=False)
    assert proc.returncode == 0 and "hearthnet: corpus verloren: not_found:" in proc.stderr
    proc = reader.cli("query", "Chatbots", "--corpus", "verloren", "--corpus", "falschdim", check=False)
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("hearthnet: none of the 2 corpora answered: verloren: not_found: ")
    assert "; falschdim: bad_request: archive Falsche Dimension: the query vector has 512" in line
    # a filter every corpus refuses alike is the one error, not a failure per corpus
    proc = reader.cli(
        "query",
        "x",
        "--corpus",
        "creativity",
        "--corpus",
        "topologie",
        "--filter",
        '{"page": {"$near": 1}}',
        check=False,
    )
    (line,) = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and line.startswith("hearthnet: bad_request: ") and "$near" in line


def test_a_missing_collection_is_not_found_and_a_wrong_dimension_the_clear_error(
    mesh: LocalMesh, archives: Archives
) -> None:
    reader = mesh.nodes["reader"]
    proc = reader.cli("query", "Stetigkeit", "--corpus", "verloren", check=False)
    assert proc.returncode == 1
    assert f"collection {MISSING_COLLECTION} does not exist on ChromaDB" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("hearthnet: ")
    proc = reader.cli("query", "Stetigkeit", "--corpus", "falschdim", check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("hearthnet: ")
    assert "archive Falsche Dimension: the query vector has 512 dimensions" in proc.stderr
    assert f"collection {archives.german.collection_name} holds 768-dimensional vectors" in proc.stderr


def test_nothing_is_ever_written_to_an_archive(mesh: LocalMesh, tmp_path: Path) -> None:
    reader, host = mesh.nodes["reader"], mesh.nodes["host"]
    note = tmp_path / "note.txt"
    note.write_text("a note that must not reach an archive")
    proc = reader.cli("ingest", str(note), "--corpus", "creativity", check=False)
    assert proc.returncode == 1 and "corpus creativity is an archive served read-only" in proc.stderr
    cid = reader.cli_json("file", "put", str(note))["doc_cid"]
    for node, capability, params, inp in (
        (host, "rag.ingest", {"corpus": "creativity"}, {"doc_cid": cid}),
        (reader, "rag.delete", {"corpus": "creativity"}, {"doc_cid": cid}),
    ):
        proc = node.cli(
            "call", capability, "--params", json.dumps(params), "--input", json.dumps(inp), check=False
        )
        assert proc.returncode == 1 and "bad_request" in proc.stderr, proc.stderr
        assert "is the archive Creativity in ML" in proc.stderr and "read-only" in proc.stderr
    proc = host.cli("rag", "reindex", "--corpus", "creativity", check=False)
    assert proc.returncode == 1 and "read-only: cannot reindex it" in proc.stderr


def test_chromadb_stopped_is_a_partition_and_the_node_keeps_serving(
    mesh: LocalMesh, archives: Archives
) -> None:
    reader, host = mesh.nodes["reader"], mesh.nodes["host"]
    ensure_drafts(mesh)
    archives.chroma.stop()
    try:
        proc = reader.cli("query", "Chatbots", "--corpus", "creativity", check=False)
        assert proc.returncode == 1
        assert f"archive Creativity in ML: ChromaDB at {archives.chroma.url}" in proc.stderr
        assert host.process is not None and host.process.poll() is None
        assert host.status()["node_id"] == host.node_id  # the host answers as before
        listed = {c["name"]: c for c in reader.cli_json("corpora")["corpora"] if c["node"] == host.node_id}
        assert (
            listed["creativity"]["online"] is False and listed["creativity"]["error"]["error"] == "partition"
        )
        # the web UI's Library says so too (it once marked every answering host's rows online)
        rows = ui_corpora(reader, host)
        assert rows["creativity"]["read_only"] is True and rows["creativity"]["online"] is False
        # another corpus still answers, named beside the failed archive
        code, doc, _ = query_json(reader, "heating oil", "--corpus", "creativity", "--corpus", "drafts")
        assert code == 0 and {c["corpus"]: c["status"] for c in doc["corpora"]} == {
            "creativity": "failed",
            "drafts": "ok",
        }
    finally:
        archives.chroma.start()
    code, doc, _ = query_json(reader, "Chatbots", "--corpus", "creativity", "-k", "1")
    assert code == 0 and doc["chunks"][0]["metadata"]["layer"] == "chunk"
    assert ui_corpora(reader, host)["creativity"]["online"] is True


def ui_corpora(reader: MeshNode, host: MeshNode) -> dict[str, dict[str, Any]]:
    """The Library's rows of ``host``'s corpora, as ``reader``'s web UI lists them to its owner."""
    ui = Ui(owner_link(reader))
    try:
        corpora = ui.get("/api/corpora").json()["corpora"]
    finally:
        ui.close()
    return {c["name"]: c for c in corpora if c["node"] == host.node_id}


# --------------------------------------------------------------------------- drafts (seed 004)

HEATING = "Heating oil delivery is scheduled for Tuesday morning; the tank in the cellar holds 3000 litres."


def cli_stdin(node: MeshNode, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``hearthnet ARGS`` on ``node`` with ``text`` on stdin."""
    cmd = [sys.executable, "-m", "hearthnet.frontends.cli", "--home", str(node.home), *args]
    return subprocess.run(
        cmd, input=text, capture_output=True, text=True, env={**node.env, **node.extra_env}, timeout=120
    )


def ensure_drafts(mesh: LocalMesh) -> None:
    """The corpus ``drafts`` on ``emb``: one note read from the reader's stdin, with typed metadata."""
    reader = mesh.nodes["reader"]
    proc = cli_stdin(
        reader,
        HEATING,
        *("ingest", "-", "--corpus", "drafts", "--filename", "heating.md", "--json"),
        *("--meta", "subject=Heating oil", "--meta", "timestamp=2024-05-01T09:30:00"),
        *("--meta", "priority=2", "--meta", "urgent=true", "--meta", "cost=412.5"),
        *("--meta", "ref:str=007", "--meta", "due:date=2024-05-07"),
    )
    assert proc.returncode == 0, proc.stderr
    (entry,) = json.loads(proc.stdout)["results"]
    assert entry["ok"] and entry["path"] == "-" and entry["node"] == mesh.nodes["emb"].node_id


def test_meta_and_stdin_round_trip_typed_and_filterable(mesh: LocalMesh) -> None:
    reader = mesh.nodes["reader"]
    ensure_drafts(mesh)
    code, doc, _ = query_json(reader, "heating oil", "--corpus", "drafts", "-k", "1")
    md = doc["chunks"][0]["metadata"]
    assert doc["chunks"][0]["text"] == HEATING and md["doc_filename"] == "heating.md"
    assert {k: md[k] for k in ("subject", "timestamp", "priority", "urgent", "cost", "ref", "due")} == {
        "subject": "Heating oil",
        "timestamp": "2024-05-01T09:30:00",
        "priority": 2,
        "urgent": True,
        "cost": 412.5,
        "ref": "007",
        "due": "2024-05-07",
    }
    for where, hits in (
        ({"priority": {"$gte": 2}, "urgent": True}, 1),
        ({"priority": {"$gt": 2}}, 0),
        ({"due": {"$eq": "2024-05-07"}}, 1),
    ):
        code, doc, _ = query_json(reader, "heating oil", "--corpus", "drafts", "--filter", json.dumps(where))
        assert code == 0 and len(doc["chunks"]) == hits, where
    table = reader.cli("query", "heating oil", "--corpus", "drafts", "-k", "1", "--table").stdout.splitlines()
    assert table[0].split() == ["#", "score", "subject", "timestamp", "snippet"]
    assert (
        "Heating oil" in table[1] and "2024-05-01T09:30:00" in table[1] and "Heating oil delivery" in table[1]
    )
    for bad, message in (
        (["--meta", "priority:int=high"], "--meta priority: 'high' is not a whole number"),
        (["--meta", "due:date=May 7"], "is not an ISO 8601 date"),
        (["--meta", "x=1", "--meta", "x=2"], "--meta x is given twice"),
        (["--meta", "novalue"], "must be KEY=VALUE"),
    ):
        proc = cli_stdin(reader, "text", "ingest", "-", "--corpus", "drafts", *bad)
        assert proc.returncode == 1 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = cli_stdin(reader, "", "ingest", "-", "--corpus", "drafts")
    assert proc.returncode == 1 and "stdin is empty" in proc.stderr


AUTHORS = ("anna", "bruno", "carla", "dieter", "emma")


@pytest.mark.anyio
async def test_fifty_small_texts_with_metadata_are_searched_with_a_filter(
    mesh: LocalMesh, tmp_path: Path
) -> None:
    """Seed 004's load in small: 50 drafts, each with its own metadata, then filtered searches."""
    emb = mesh.nodes["emb"]
    topics = ("invoice", "meeting", "garden", "holiday", "repair")
    async with AsyncClient(emb.home) as client:
        for i in range(50):
            path = tmp_path / f"draft-{i:02d}.txt"
            path.write_text(f"Draft {i} about the {topics[i % 5]} for {AUTHORS[i // 10]}: note number {i}.")
            cid = (await client.call("file.import", input={"path": str(path), "pin": False})).output[
                "doc_cid"
            ]
            meta = {
                "subject": f"{topics[i % 5]} {i}",
                "author": AUTHORS[i // 10],
                "priority": i % 4,
                "urgent": i % 7 == 0,
                "timestamp": f"2024-06-{1 + i % 28:02d}T10:00:00",
            }
            await client.call(
                "rag.ingest",
                params={"corpus": "letters"},
                input={"doc_cid": cid, "filename": path.name, "metadata": meta},
                timeout=60,
            )
        carla = (
            await client.call(
                "rag.query",
                params={"corpus": "letters"},
                input={"query": "garden", "k": 20, "filter": {"author": {"$eq": "carla"}}},
            )
        ).output["chunks"]
        assert len(carla) == 10 and {c["metadata"]["author"] for c in carla} == {"carla"}
        assert carla[0]["metadata"]["subject"] in {"garden 22", "garden 27"}
        urgent = (
            await client.call(
                "rag.query",
                params={"corpus": "letters"},
                input={
                    "query": "note",
                    "k": 20,
                    "filter": {"$and": [{"urgent": True}, {"priority": {"$gte": 1}}]},
                },
            )
        ).output["chunks"]
    expected = {f"{topics[i % 5]} {i}" for i in range(50) if i % 7 == 0 and i % 4 >= 1}
    assert {c["metadata"]["subject"] for c in urgent} == expected
