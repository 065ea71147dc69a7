"""The rerank step across real node processes over TCP.

Node ``hearth`` holds corpus ``heating`` and serves ``rerank.text``: its
``[[rerank.servers]]`` points at a real rerank server on 127.0.0.1 in this
process (Cohere/Jina protocol).  Node ``laptop``, with neither documents,
embedder nor model, asks with ``hearthnet ask --debug --json``; its answer is
extractive (no ``llm.chat`` anywhere), its context ordered by the reranker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hearthnet.testing import LocalMesh, MeshNode, wait_for
from tests.rerank_server import MODEL, RerankServer

DEMO = Path(__file__).resolve().parents[2] / "hearthnet" / "demo"
BOILER = "When is the boiler serviced?"


@pytest.fixture(scope="module")
def server() -> Iterator[RerankServer]:
    with RerankServer() as s:
        yield s


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory, server: RerankServer) -> Iterator[LocalMesh]:
    m = LocalMesh(tmp_path_factory.mktemp("rerank"))
    try:
        hearth = m.add("hearth")
        with (hearth.home / "config.toml").open("a") as f:
            f.write(
                f'\n[[rerank.servers]]\nbase_url = "{server.url}/v1"\nmodel = "{MODEL}"\n'
                'protocol = "cohere"\n'
            )
        # every chunk of the handbook reaches the rerank step, the weakest included
        laptop = m.add(
            "laptop",
            env={"HEARTHNET_EMBEDDING": "0", "HEARTHNET_RAG": "0", "RAG_SIMILARITY_THRESHOLD": "0"},
        )
        m.found(hearth)
        m.invite(hearth, laptop, "member")
        m.wait_full_mesh()
        hearth.cli_json("ingest", str(DEMO / "heating_handbook.pdf"), "--corpus", "heating", timeout=300)
        wait_for(lambda: ready(laptop), timeout=60, what="the laptop to see the corpus and the reranker")
        yield m
    finally:
        m.close()


def ready(node: MeshNode) -> bool:
    caps = node.cli_json("status", timeout=10)["capabilities"]
    names = {
        (c["capability"].split("@")[0], c["params"].get("corpus") or c["params"].get("model")) for c in caps
    }
    return {("rag.query", "heating"), ("rerank.text", MODEL)} <= names


def ask(node: MeshNode) -> Any:
    proc = node.cli("ask", BOILER, "--debug", "--json", "--no-cache", timeout=120)
    return json.loads(proc.stdout)


def test_the_reranker_on_one_node_orders_the_context_of_an_ask_on_another(
    mesh: LocalMesh, server: RerankServer
) -> None:
    laptop = mesh.nodes["laptop"]
    # the reranker broken: the answer comes in retrieval order, and says so
    server.mode, server.status = "error", 500
    plain = ask(laptop)
    assert plain["mode"] == "extractive" and plain["meta"]["rag"] == "used"
    assert plain["meta"]["rerank"] == "failed" and plain["meta"]["rerank_error"] == "internal_error"
    dense = [c["chunk_id"] for c in plain["meta"]["debug"]["chunks"]]
    scores = [c["score"] for c in plain["meta"]["debug"]["chunks"]]
    assert len(dense) >= 3 and scores == sorted(scores, reverse=True)
    texts = {s["chunk_id"]: s["text"] for s in plain["sources"]}

    # working, and scoring highest what retrieval ranks last: that chunk leads the context
    server.mode = "normal"
    server.boost = {texts[dense[-1]]: 1.0}
    before = len(server.requests)
    out = ask(laptop)
    meta = out["meta"]
    assert meta["rerank"] == "used" and "rerank_error" not in meta
    assert meta["debug"]["rerank"]["model"] == MODEL and meta["debug"]["rerank"]["chunks"] == len(dense)
    chunks = meta["debug"]["chunks"]
    assert chunks[0]["chunk_id"] == dense[-1] and chunks[0]["rerank"] == 1.0
    assert chunks[0]["score"] == pytest.approx(min(scores), abs=1e-6)  # its cosine, unchanged
    assert sorted(c["chunk_id"] for c in chunks) == sorted(dense)
    assert server.requests[before:] == [("/v1/rerank", MODEL, len(dense))]

    # the same, as a person reads it on stderr
    human = laptop.cli("ask", BOILER, "--debug", "--no-cache", timeout=120)
    assert f"debug: rerank used by {MODEL} in " in human.stderr
    assert f"debug: context 1: {dense[-1]} (heating) " in human.stderr and " rerank 1.0" in human.stderr


def test_with_the_rerank_server_gone_the_ask_still_answers(mesh: LocalMesh, server: RerankServer) -> None:
    laptop = mesh.nodes["laptop"]
    server.close()
    out = ask(laptop)
    assert out["mode"] == "extractive" and out["answer"] and out["citations"]
    assert out["meta"]["rerank"] == "failed" and out["meta"]["rerank_error"] == "partition"
    scores = [c["score"] for c in out["meta"]["debug"]["chunks"]]
    assert scores == sorted(scores, reverse=True)  # retrieval's order
