"""The ChromaDB door and TEI's routes driven by the official ``chromadb`` client and by HTTP, against
real nodes.

Two nodes: ``a`` (founder, the one asked) hosts corpus ``heating`` (the demo's heating handbook)
and a note in the owner's ``personal`` corpus; ``b`` (trusted) hosts corpus ``manuals`` (a shared
PDF), read through ``a`` over the bus.  Keys come from ``hearthnet ui token create``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import httpx
import numpy as np
import pytest
from chromadb.config import Settings
from chromadb.errors import AuthorizationError, ChromaAuthError, NotFoundError

from hearthnet.client import Client, plain_output
from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.chroma_fixture import close_http_clients
from tests.shared_data import PDF_DIR
from tests.ui.harness import person_link, token_of, ui_url

ROOT = Path(__file__).resolve().parents[2]
HEATING = ROOT / "hearthnet" / "demo" / "heating_handbook.pdf"
MANUAL = PDF_DIR / "en_paper_naacl06_shinyama_2col.pdf"
MINILM = "all-MiniLM-L6-v2"
UI_ENV = {"HEARTHNET_UI_LISTEN": "127.0.0.1:0"}
QUESTION = "How often should the boiler be serviced?"


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MeshNode, MeshNode]]:
    root = tmp_path_factory.mktemp("chroma-door")
    m = LocalMesh(root)
    try:
        a = m.add("a", env=UI_ENV)
        config = a.home / "config.toml"  # every test here shares one key: its rate is not what is tested
        config.write_text(
            config.read_text().replace(
                "[ui]\n", "[ui]\napi_requests_per_minute = 60000\napi_burst = 5000\n", 1
            )
        )
        b = m.add("b")
        m.found(a)
        m.invite(a, b, "trusted")
        m.wait_full_mesh([a, b])
        a.cli_json("ingest", str(HEATING), "--corpus", "heating", timeout=300)
        note = root / "diary.txt"
        note.write_text("My private diary: the spare key is under the blue flower pot.\n")
        a.cli_json("ingest", str(note), "--corpus", "personal", timeout=300)
        b.cli_json("ingest", str(MANUAL), "--corpus", "manuals", timeout=300)
        wait_for(
            lambda: any(
                c["capability"] == "rag.get@1.0" and (c["params"] or {}).get("corpus") == "manuals"
                for c in a.status()["capabilities"]
            ),
            timeout=60,
            what="a to see manuals' rag.get on b",
        )
        wait_for(lambda: (a.home / "ui.json").exists(), timeout=30, what="the UI to start")
        yield a, b
    finally:
        m.close()


@pytest.fixture(scope="module")
def node(mesh: tuple[MeshNode, MeshNode]) -> MeshNode:
    return mesh[0]


@pytest.fixture(autouse=True)
def _close_chroma_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The HTTP session of each chromadb client a test made is closed when it ends (chromadb never
    closes it, see ``close_http_clients``), also of one whose constructor failed (a wrong key)."""
    from chromadb.api.fastapi import FastAPI

    made: list[FastAPI] = []
    init = FastAPI.__init__

    def recorded(self: FastAPI, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(FastAPI, "__init__", recorded)
    yield
    for api in made:
        session = getattr(api, "_session", None)
        if session is not None:
            session.close()


@pytest.fixture(scope="module")
def key(node: MeshNode) -> str:
    return token_of(person_link(node, "script", "member"))


def http_client(node: MeshNode, key: str, **kw: Any) -> Any:
    url = httpx.URL(ui_url(node))
    settings = Settings(
        chroma_client_auth_provider="chromadb.auth.token_authn.TokenAuthClientProvider",
        chroma_client_auth_credentials=key,
        anonymized_telemetry=False,
        **kw,
    )
    return chromadb.HttpClient(host=str(url.host), port=int(url.port or 80), settings=settings)


def embed(node: MeshNode, texts: list[str]) -> np.ndarray:
    with Client(node.home) as c:
        result = c.call("embed.text", params={"model": MINILM}, input={"texts": texts})
    return np.array(plain_output(result.output)["embeddings"], dtype=np.float32)


def rag_query(node: MeshNode, corpus: str, vector: list[float], k: int, **inp: Any) -> list[dict[str, Any]]:
    with Client(node.home) as c:
        result = c.call("rag.query", params={"corpus": corpus}, input={"embedding": vector, "k": k, **inp})
    return list(plain_output(result.output)["chunks"])


# -- the official client ---------------------------------------------------------------------------
def test_the_client_lists_every_corpus_but_personal_with_its_model_and_host(node: MeshNode, key: str) -> None:
    client = http_client(node, key)
    assert client.heartbeat() > 0
    cols = {c.name: c for c in client.list_collections()}
    assert {"heating", "manuals"} <= set(cols) and "personal" not in cols
    heating = client.get_collection("heating")
    assert heating.metadata["embedding_model"] == MINILM and heating.metadata["host_name"] == "a"
    assert heating.metadata["hnsw:space"] == "cosine" and heating.count() > 0
    assert client.get_collection("manuals").metadata["host_name"] == "b"
    with pytest.raises(NotFoundError):
        client.get_collection("personal")
    with pytest.raises(NotFoundError):
        client.get_collection("no-such-corpus")


def test_query_with_embeddings_equals_rag_query_for_the_same_vector(node: MeshNode, key: str) -> None:
    vector = embed(node, [QUESTION])[0].tolist()
    col = http_client(node, key).get_collection("heating")
    got = col.query(query_embeddings=[vector], n_results=5, include=["documents", "metadatas", "distances"])
    expected = rag_query(node, "heating", vector, 5)
    assert got["ids"][0] == [h["metadata"]["chunk_id"] for h in expected]
    for distance, hit in zip(got["distances"][0], expected, strict=True):
        assert distance == pytest.approx(1.0 - hit["similarity"], abs=1e-4)
    assert got["documents"][0][0] == expected[0]["text"]
    assert got["metadatas"][0][0]["doc_title"] and isinstance(got["metadatas"][0][0]["page"], int)
    # a where filter: only chunks of that page
    page = got["metadatas"][0][0]["page"]
    filtered = col.query(query_embeddings=[vector], n_results=3, where={"page": page})
    assert filtered["ids"][0] and all(m["page"] == page for m in filtered["metadatas"][0])
    # embeddings included: the stored vectors of the hits
    with_vectors = col.query(query_embeddings=[vector], n_results=2, include=["embeddings"])
    stored = np.array(with_vectors["embeddings"][0], dtype=np.float32)
    assert stored.shape == (2, 384)
    assert float(stored[0] @ np.array(vector, dtype=np.float32)) == pytest.approx(
        expected[0]["similarity"], abs=1e-3
    )


def test_a_collection_on_another_node_is_read_through_this_one(node: MeshNode, key: str) -> None:
    col = http_client(node, key).get_collection("manuals")
    vector = embed(node, ["extracting paraphrases from news articles"])[0].tolist()
    got = col.query(query_embeddings=[vector], n_results=3)
    assert got["ids"][0] == [h["metadata"]["chunk_id"] for h in rag_query(node, "manuals", vector, 3)]
    page = col.get(limit=4, include=["documents"])
    assert len(page["ids"]) == 4 and all(page["documents"])


def test_query_texts_embedded_through_the_nodes_tei_route(node: MeshNode, key: str) -> None:
    from chromadb.utils.embedding_functions import HuggingFaceEmbeddingServer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # its api_key argument is deprecated
        ef = HuggingFaceEmbeddingServer(url=ui_url(node) + "/embed", api_key=key)
    try:
        col = http_client(node, key).get_collection("heating", embedding_function=ef)
        got = col.query(query_texts=[QUESTION], n_results=3)
    finally:
        ef._session.close()  # chromadb opens it and never closes it
    vector = embed(node, [QUESTION])[0].tolist()
    assert got["ids"][0] == [h["metadata"]["chunk_id"] for h in rag_query(node, "heating", vector, 3)]


def test_get_by_ids_where_and_document_text_pages_like_chroma(node: MeshNode, key: str) -> None:
    col = http_client(node, key).get_collection("manuals")
    total = col.count()
    everything = col.get()
    assert total > 8 and len(everything["ids"]) == total == len(set(everything["ids"]))
    first, second = col.get(limit=3, offset=0), col.get(limit=3, offset=3)
    assert first["ids"] + second["ids"] == everything["ids"][:6]
    by_id = col.get(ids=everything["ids"][2:4], include=["documents", "metadatas", "embeddings"])
    assert sorted(by_id["ids"]) == sorted(everything["ids"][2:4])
    assert np.array(by_id["embeddings"]).shape == (2, 384)
    page = everything["metadatas"][-1]["page"]
    on_page = col.get(where={"page": page})
    assert on_page["ids"] and len(on_page["ids"]) < total
    assert all(m["page"] == page for m in on_page["metadatas"])
    word = max(re.findall(r"[a-z]{6,}", everything["documents"][5]), key=len)
    with_word = col.get(where_document={"$contains": word}, include=["documents"])
    assert 0 < len(with_word["ids"]) < total and all(word in d for d in with_word["documents"])


def test_every_write_is_refused_with_chromas_error_and_the_way_to_ingest(node: MeshNode, key: str) -> None:
    client = http_client(node, key)
    col = client.get_collection("heating")
    before = col.count()
    for write in (
        lambda: col.add(ids=["x"], embeddings=[[0.0] * 384], documents=["x"]),
        lambda: col.upsert(ids=["x"], embeddings=[[0.0] * 384]),
        lambda: col.delete(ids=[col.get(limit=1)["ids"][0]]),
        lambda: client.create_collection("new-one"),
        lambda: client.delete_collection("heating"),
    ):
        with pytest.raises(AuthorizationError, match="hearthnet ingest"):
            write()
    assert col.count() == before


def test_a_wrong_or_missing_key_is_chromas_auth_error(node: MeshNode) -> None:
    with pytest.raises(ChromaAuthError):
        http_client(node, "hn_not-a-key").list_collections()
    url = ui_url(node)
    assert httpx.get(url + "/api/v2/heartbeat").status_code == 200
    refused = httpx.get(url + "/api/v2/tenants/default_tenant/databases/default_database/collections")
    assert refused.status_code == 401 and refused.json()["error"] == "AuthError"


def test_bad_queries_are_invalid_argument_errors(node: MeshNode, key: str) -> None:
    col = http_client(node, key).get_collection("heating")
    with pytest.raises(Exception, match="384") as err:
        col.query(query_embeddings=[[0.1] * 12], n_results=2)
    assert type(err.value).__name__ == "InvalidArgumentError"
    with pytest.raises(Exception, match="n_results"):
        col.query(query_embeddings=[[0.1] * 384], n_results=500)


# -- TEI's routes ----------------------------------------------------------------------------------
def test_tei_info_embed_and_errors(node: MeshNode, key: str) -> None:
    base = ui_url(node)
    auth = {"Authorization": f"Bearer {key}"}
    info = httpx.get(base + "/info", headers=auth).json()
    assert (
        info["model_id"] == MINILM and info["max_input_length"] > 0 and info["max_client_batch_size"] == 256
    )
    texts = ["When is the boiler serviced?", "ok"]
    got = httpx.post(base + "/embed", json={"inputs": texts}, headers=auth)
    assert got.status_code == 200
    np.testing.assert_allclose(np.array(got.json()), embed(node, texts), atol=1e-5)
    one = httpx.post(f"{base}/t/{key}/embed", json={"inputs": texts[0]})  # the key in the path
    assert one.status_code == 200 and len(one.json()) == 1 and len(one.json()[0]) == 384
    unauthorised = httpx.post(base + "/embed", json={"inputs": "x"})
    assert unauthorised.status_code == 401 and unauthorised.json()["error_type"] == "Unauthorized"
    empty = httpx.post(base + "/embed", json={"inputs": []}, headers=auth)
    assert empty.status_code == 422 and empty.json()["error_type"] == "Validation"
    too_many = httpx.post(base + "/embed", json={"inputs": ["x"] * 257}, headers=auth)
    assert too_many.status_code == 413 and too_many.json()["error_type"] == "Validation"
    long = httpx.post(base + "/embed", json={"inputs": "word " * 1000}, headers=auth)
    assert long.status_code == 413 and "truncate" in long.json()["error"]
    cut = httpx.post(base + "/embed", json={"inputs": "word " * 1000, "truncate": True}, headers=auth)
    assert cut.status_code == 200
    no_reranker = httpx.post(base + "/rerank", json={"query": "q", "texts": ["a"]}, headers=auth)
    assert no_reranker.status_code >= 400 and "error_type" in no_reranker.json()


# -- programs written for ChromaDB, unchanged ------------------------------------------------------
class NodeEmbeddings:
    """LangChain's ``Embeddings`` through the node's ``/v1/embeddings`` (the official openai client)."""

    def __init__(self, node: MeshNode, key: str) -> None:
        import openai

        self._client = openai.OpenAI(base_url=ui_url(node) + "/v1", api_key=key, max_retries=0, timeout=120)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        got = self._client.embeddings.create(model=MINILM, input=texts, encoding_format="float")
        return [d.embedding for d in got.data]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


PAPER_QUESTION = "What is preemptive information extraction?"


def test_langchains_chroma_store_retrieves_the_right_chunk(node: MeshNode, key: str) -> None:
    from langchain_chroma import Chroma
    from langchain_core.embeddings import Embeddings

    class Through(NodeEmbeddings, Embeddings):
        pass

    store = Chroma(
        client=http_client(node, key), collection_name="manuals", embedding_function=Through(node, key)
    )
    docs = store.similarity_search_with_score(PAPER_QUESTION, k=3)
    vector = embed(node, [PAPER_QUESTION])[0].tolist()
    expected = rag_query(node, "manuals", vector, 3)
    assert [d.id for d, _ in docs] == [h["metadata"]["chunk_id"] for h in expected]
    top, distance = docs[0]
    assert (
        "preemptive" in top.page_content.lower() and top.metadata["page"] == expected[0]["metadata"]["page"]
    )
    assert distance == pytest.approx(1.0 - expected[0]["similarity"], abs=1e-4)


SEED = sorted((ROOT.parent / "shared" / "seeds").glob("000_*.txt"))


def seed_code(*names: str) -> str:
    """The seed's Python blocks that define ``names``, verbatim and in the seed's order."""
    text = SEED[0].read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    wanted = [b for b in blocks if any(re.search(rf"^(def|class) {n}\b", b, flags=re.M) for n in names)]
    assert len(wanted) >= len(names) - 1, "the seed's retriever code was not found"
    return "\n\n".join(wanted)


@pytest.mark.skipif(not SEED, reason="seed 000 is not beside the repository")
def test_the_seeds_retriever_unchanged_reads_the_mesh(
    node: MeshNode, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging
    import os

    url = ui_url(node)
    monkeypatch.setenv("DOCPROC_TEI_EMBEDDINGS_URL", f"{url}/t/{key}")
    monkeypatch.setenv("CHROMA_CLIENT_AUTH_PROVIDER", "chromadb.auth.token_authn.TokenAuthClientProvider")
    monkeypatch.setenv("CHROMA_CLIENT_AUTH_CREDENTIALS", key)
    monkeypatch.setenv("ANONYMIZED_TELEMETRY", "False")
    # The seed's runtime is its own process: no ChromaDB client of this test process's other tests
    # (cached per host:port with their settings) may stand in for the one it makes.
    close_http_clients()
    host = httpx.URL(url)
    chromadb.HttpClient(host=str(host.host), port=int(host.port or 80)).get_collection("manuals")  # says why
    close_http_clients()
    namespace: dict[str, Any] = {"os": os, "logger": logging.getLogger("seed"), "__name__": "seed"}
    code = seed_code("RagArchiveConfig", "_embed_query", "create_archive_search_tool", "_parse_host")
    # the seed's own code, unchanged (compiled without this module's `from __future__ import annotations`)
    exec(compile(code, str(SEED[0]), "exec", dont_inherit=True), namespace)
    config = namespace["RagConfig"](
        archives=[
            {"name": "papers", "collection_name": "manuals", "chromadb_url": url, "embedding_model": MINILM}
        ]
    )
    tool = namespace["create_archive_search_tool"](config)
    answer = tool.invoke({"query": PAPER_QUESTION, "top_k": 3})
    vector = embed(node, [PAPER_QUESTION])[0].tolist()
    expected = rag_query(node, "manuals", vector, 3, include_text=True)
    passages = answer.split("\n\n---\n\n")
    assert len(passages) == 3
    for passage, hit in zip(passages, expected, strict=True):
        assert passage.startswith("[") and "Archiv: papers" in passage
        assert passage.split("\n", 1)[1] == hit["text"]
